package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Re-issued requests of clients that use MCP tasks (docs/gateway.md,
// "Re-issued requests"). A tools/call of such a client goes the tasks'
// way (tasks.go), not through the window of reissue.go, but a re-issue of
// it must not run a call that changes something twice either. So a call
// of a tool the window would keep (neither read-only nor idempotent) is
// keyed as the window keys it, and:
//
//   - when its request ends before any answer (the stream broke before
//     the threshold), the call is not cancelled: it becomes a task at once,
//     durable as any task, and goes on;
//   - a re-issue of the request within reissue.window is answered with
//     that call: its task (the same taskId, to poll), or its result when
//     it ended before becoming one; a call still running, not yet a task,
//     becomes one for the re-issue;
//   - once an answer reached the client (its result, or the task), the
//     key is forgotten: the same request made again later runs;
//   - an explicit notifications/cancelled naming the request cancels the
//     call (the task reads cancelled).

// keyedTask is a task's call that a re-issue of its request is answered
// with.
type keyedTask struct {
	lt  *liveTask
	req reissueKey // reissueRequestKey, for cancellations
	// left is when its request ended without an answer; zero while it
	// waits for one.
	left time.Time
}

// keep notes lt as the call of key; false when the window's bound
// (reissue.max_entries) is reached: the call then goes unkeyed, as
// without the window.
func (tr *taskRunner) keep(key, req reissueKey, lt *liveTask) bool {
	w := tr.g.reissue
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if now := time.Now(); now.After(tr.nextSweep) {
		tr.nextSweep = now.Add(time.Second)
		tr.sweepKeyedLocked(now, w.opts.Window)
	}
	if len(tr.keyed) >= w.opts.MaxEntries {
		return false
	}
	tr.keyed[key] = &keyedTask{lt: lt, req: req}
	return true
}

// sweepKeyedLocked forgets the calls whose request left more than window
// ago (their tasks are polled by their ids from then on); tr.mu is held.
// keep sweeps at most once a second, as the window does.
func (tr *taskRunner) sweepKeyedLocked(now time.Time, window time.Duration) {
	for k, kt := range tr.keyed {
		if !kt.left.IsZero() && now.Sub(kt.left) > window {
			delete(tr.keyed, k)
		}
	}
}

// answered forgets key once an answer of its call reached the client:
// delivered is whether its request was still there to be written to.
func (tr *taskRunner) answered(key reissueKey, delivered bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	kt := tr.keyed[key]
	if kt == nil {
		return
	}
	if delivered {
		delete(tr.keyed, key)
		return
	}
	if kt.left.IsZero() {
		kt.left = time.Now()
	}
}

// reanswer answers a re-issue of key's request from its call, if one is
// kept within the window; false when the call must be made.
func (tr *taskRunner) reanswer(w http.ResponseWriter, r *http.Request, id json.RawMessage, key reissueKey, note Reissued) bool {
	win := tr.g.reissue
	tr.mu.Lock()
	kt := tr.keyed[key]
	if kt != nil && !kt.left.IsZero() && time.Since(kt.left) > win.opts.Window {
		delete(tr.keyed, key)
		kt = nil
	}
	tr.mu.Unlock()
	if kt == nil {
		return false
	}
	ctx := r.Context()
	lt := kt.lt
	lt.wmu.Lock()
	created, finished, session := lt.created, lt.finished, lt.state.Session
	lt.wmu.Unlock()
	running := !created && !finished
	if running {
		// Still waiting for its threshold: a task now, which the
		// re-issue is answered with.
		ok, err := lt.create(ctx)
		switch {
		case err != nil:
			writeRPCError(w, http.StatusOK, id, codeInternalError, "toolmux: could not create the task: "+err.Error())
			return true
		case !ok: // it ended meanwhile
			<-lt.done
			finished = true
		default:
			created = true
		}
	}
	win.answered.Add(1)
	if win.log != nil {
		n := note
		n.Task, n.Running, n.Kept, n.At = session, running || created, true, time.Now()
		win.log.Reissued(context.WithoutCancel(ctx), n)
	}
	delivered := ctx.Err() == nil
	if finished {
		writeResult(w, id, completeResult(lt.res))
	} else {
		lt.wmu.Lock()
		out := taskFields(&lt.state, tr.o)
		lt.wmu.Unlock()
		out["resultType"] = "task"
		writeResult(w, id, out)
	}
	tr.answered(key, delivered)
	return true
}

// cancelRequest cancels the keyed call of the request req names (a
// client's notifications/cancelled); false when there is none.
func (tr *taskRunner) cancelRequest(req reissueKey) bool {
	if tr == nil {
		return false
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, kt := range tr.keyed {
		if kt.req == req {
			kt.lt.cancel(errTaskCancelled)
			return true
		}
	}
	return false
}
