package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// shellCall makes a shell call through the API that needs approval, in
// the background; the channel gets its status and record.
func (f fixture) shellCall(ctx context.Context, t *testing.T, file string) <-chan callResult {
	out := make(chan callResult, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/api/tools/builtin/shell/call",
			strings.NewReader(`{"arguments": {"command": "touch `+file+`"}}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- callResult{err: err}
			return
		}
		defer resp.Body.Close()
		var r callResult
		r.status = resp.StatusCode
		r.err = json.NewDecoder(resp.Body).Decode(&r.rec)
		out <- r
	}()
	return out
}

type callResult struct {
	status int
	rec    tool.Record
	err    error
}

func (f fixture) waitPending(t *testing.T, n int) []api.Pending {
	t.Helper()
	var pending []api.Pending
	if !testservers.Eventually(30*time.Second, func() bool {
		pending = nil
		f.get(t, "/api/approvals", &pending)
		return len(pending) == n
	}) {
		t.Fatalf("%d calls wait for approval, want %d: %+v", len(pending), n, pending)
	}
	return pending
}

func (f fixture) ran(file string) bool {
	_, err := os.Stat(filepath.Join(f.workspace, file))
	return err == nil
}

// With nobody attached to answer, a call that needs approval is refused
// at once with how to allow it, and never shows as waiting.
func TestApprovalRefusedWhenNobodyIsThere(t *testing.T) {
	f := newFixtureWith(t, &api.ApprovalOptions{Timeout: time.Hour, Where: "http://127.0.0.1:8931/"})
	r := <-f.shellCall(context.Background(), t, "made.txt")
	if r.err != nil || r.status != http.StatusForbidden || r.rec.Error == nil || r.rec.Error.Kind != tool.KindApprovalUnavailable {
		t.Fatalf("got %d %+v %v", r.status, r.rec.Error, r.err)
	}
	msg := r.rec.Error.Message
	for _, want := range []string{"no one can be asked", "http://127.0.0.1:8931/", "only while it is open", "--yes", "policy: {rules:"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not say %q: %s", want, msg)
		}
	}
	if f.ran("made.txt") {
		t.Fatal("an unapproved call ran")
	}
	// It never waited: no approval_request, no awaiting_approval.
	var evs []stream.Event
	if !testservers.Eventually(10*time.Second, func() bool {
		evs, _ = f.log.StreamStore().EventsAfter(context.Background(), 0, r.rec.Task, 100)
		return len(evs) > 0 && strings.Contains(string(evs[len(evs)-1].Data), `"result"`)
	}) {
		t.Fatalf("the call's events were not stored: %+v", evs)
	}
	for _, e := range evs {
		if e.Name == stream.EventApprovalRequest || strings.Contains(string(e.Data), `"awaiting_approval"`) {
			t.Errorf("the refused call was shown as waiting: %s %s", e.Name, e.Data)
		}
	}
}

// A call whose client goes away while it waits is withdrawn: it leaves
// the queue, an answer given afterwards is refused as gone, and the call
// never runs.
func TestApprovalWithdrawnWhenTheClientGoes(t *testing.T) {
	f := newFixture(t)
	f.attach(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := f.shellCall(ctx, t, "made.txt")
	p := f.waitPending(t, 1)[0]
	cancel()
	if r := <-done; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the client's request: %+v", r)
	}
	f.waitPending(t, 0)
	var e apiErr
	if code := f.post(t, "/api/approvals/"+p.ID, `{"decision": "once"}`, &e); code != http.StatusGone || e.Error.Kind != "gone" ||
		!strings.Contains(e.Error.Message, "withdrawn") {
		t.Fatalf("answering a withdrawn call: %d %+v", code, e)
	}
	// The record says the call was cancelled, and it did not run.
	var calls []*tool.Record
	if !testservers.Eventually(10*time.Second, func() bool {
		calls, _ = f.log.Calls(context.Background(), p.Task)
		return len(calls) == 1
	}) {
		t.Fatalf("the withdrawn call was not recorded: %+v", calls)
	}
	if calls[0].Error == nil || calls[0].Error.Kind != tool.KindCancelled {
		t.Errorf("record: %+v", calls[0].Error)
	}
	if f.ran("made.txt") {
		t.Fatal("a withdrawn call ran")
	}
}

// When the last approver goes (the page is closed), the calls still
// waiting are refused once the grace has passed.
func TestApprovalRefusedWhenTheApproversLeave(t *testing.T) {
	f := newFixtureWith(t, &api.ApprovalOptions{Timeout: time.Hour, Grace: 50 * time.Millisecond})
	detach := f.attach(t)
	done := f.shellCall(context.Background(), t, "made.txt")
	f.waitPending(t, 1)
	detach()
	r := <-done
	if r.status != http.StatusForbidden || r.rec.Error == nil || r.rec.Error.Kind != tool.KindApprovalDenied ||
		!strings.Contains(r.rec.Error.Message, "went away") {
		t.Fatalf("got %d %+v %v", r.status, r.rec.Error, r.err)
	}
	if f.ran("made.txt") {
		t.Fatal("an unanswered call ran")
	}
}

// A call nobody answers is refused at the timeout, saying so.
func TestApprovalTimesOut(t *testing.T) {
	f := newFixtureWith(t, &api.ApprovalOptions{Timeout: 200 * time.Millisecond})
	f.attach(t)
	r := <-f.shellCall(context.Background(), t, "made.txt")
	if r.status != http.StatusForbidden || r.rec.Error == nil || r.rec.Error.Kind != tool.KindApprovalDenied ||
		!strings.Contains(r.rec.Error.Message, "nobody answered") || !strings.Contains(r.rec.Error.Message, "200ms") {
		t.Fatalf("got %d %+v %v", r.status, r.rec.Error, r.err)
	}
	f.waitPending(t, 0)
}

// /api/info says what the process is and how many approvers are there.
func TestInfo(t *testing.T) {
	f := newFixture(t)
	var in api.Info
	if code := f.get(t, "/api/info", &in); code != 200 || in.Version != "test" || in.Approvers != 0 ||
		in.ApprovalTimeoutMS != time.Minute.Milliseconds() || in.Run != nil || in.Started.IsZero() {
		t.Fatalf("info: %d %+v", code, in)
	}
	detach := f.attach(t)
	detach()
	if !testservers.Eventually(10*time.Second, func() bool {
		in = api.Info{}
		f.get(t, "/api/info", &in)
		return in.Approvers == 0
	}) {
		t.Fatalf("the approver is still counted: %+v", in)
	}
}

// /api/info gives the id of the stream's last event, so that a page can
// resume a little before it: before any event 0, then the id of the last
// event a call published, the one a stream resumed just before it
// delivers first.
func TestInfoLastEventID(t *testing.T) {
	f := newFixture(t)
	var in api.Info
	if code := f.get(t, "/api/info", &in); code != 200 || in.LastEventID != 0 {
		t.Fatalf("info before any event: %d %+v", code, in)
	}
	if code := f.post(t, "/api/tools/builtin/read_file/call", `{"arguments": {"path": "notes.txt"}}`, nil); code != 200 {
		t.Fatalf("call: %d", code)
	}
	in = api.Info{}
	f.get(t, "/api/info", &in)
	if in.LastEventID < 2 {
		t.Fatalf("info after a call: %+v, want the id of its last event", in)
	}
	if ids := f.replayIDs(t, in.LastEventID-1); len(ids) == 0 || ids[0] != in.LastEventID {
		t.Errorf("events after %d: %v, want %d first", in.LastEventID-1, ids, in.LastEventID)
	}
}

// A call made without a task is a task of its own, ended with the call.
func TestCallWithoutTaskHasItsOwnTask(t *testing.T) {
	f := newFixture(t)
	var rec tool.Record
	if code := f.post(t, "/api/tools/builtin/read_file/call", `{"arguments": {"path": "notes.txt"}}`, &rec); code != 200 || rec.Task == "" {
		t.Fatalf("call: %d %+v", code, rec)
	}
	task, err := f.log.Task(context.Background(), rec.Task)
	if err != nil || task.Status != tasklog.StatusSuccess || task.Input != "API call of builtin/read_file" || task.Ended.IsZero() {
		t.Fatalf("task %+v %v", task, err)
	}
	calls, err := f.log.Calls(context.Background(), rec.Task)
	if err != nil || len(calls) != 1 || calls[0].ID != rec.ID {
		t.Fatalf("calls %+v %v", calls, err)
	}
}

// While a call waits, a client that asked for progress is told, again
// and again, where to answer and how long is left.
func TestWaitingCallReportsProgress(t *testing.T) {
	q := api.NewApprovals(&api.ApprovalOptions{Timeout: time.Minute, ProgressInterval: 20 * time.Millisecond,
		Where: "http://127.0.0.1:8931/"})
	defer q.Attach()()
	var (
		mu  sync.Mutex
		got []tool.Progress
	)
	ctx := tool.WithProgress(context.Background(), func(p tool.Progress) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	})
	req := policy.Request{Call: tool.Call{ID: "c1", Server: "builtin", Tool: "shell"}}
	answered := make(chan policy.Answer, 1)
	go func() {
		ans, _ := q.Approve(ctx, req)
		answered <- ans
	}()
	if !testservers.Eventually(10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 3
	}) {
		t.Fatal("fewer than 3 progress reports")
	}
	if err := q.Decide("c1", policy.ProceedOnce); err != nil {
		t.Fatal(err)
	}
	if ans := <-answered; ans != policy.ProceedOnce {
		t.Fatalf("answer %v", ans)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, p := range got {
		if !strings.Contains(p.Message, "http://127.0.0.1:8931/") || !strings.Contains(p.Message, "builtin/shell") ||
			!strings.Contains(p.Message, "refused in") || p.Total != 60 {
			t.Errorf("report %d: %+v", i, p)
		}
		if i > 0 && p.Progress <= got[i-1].Progress {
			t.Errorf("progress went from %v to %v", got[i-1].Progress, p.Progress)
		}
	}
}

// How each wait ended is told, and a late answer is refused with it.
func TestEndingsAreToldAndRemembered(t *testing.T) {
	var (
		mu    sync.Mutex
		ended []api.Ending
	)
	q := api.NewApprovals(&api.ApprovalOptions{Timeout: time.Minute, OnEnded: func(_ api.Pending, e api.Ending) {
		mu.Lock()
		ended = append(ended, e)
		mu.Unlock()
	}})
	defer q.Attach()()
	ctx, cancel := context.WithCancelCause(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := q.Approve(ctx, policy.Request{Call: tool.Call{ID: "c1", Server: "s", Tool: "t"}})
		errs <- err
	}()
	if !testservers.Eventually(10*time.Second, func() bool { return len(q.Pending()) == 1 }) {
		t.Fatal("never pending")
	}
	cancel(errors.New("the client closed the request"))
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("Approve: %v", err)
	}
	err := q.Decide("c1", policy.ProceedOnce)
	var ee *api.EndedError
	if !errors.As(err, &ee) || !errors.Is(err, api.ErrUnknownApproval) || ee.Ending.Outcome != api.OutcomeWithdrawn ||
		ee.Ending.Message != "the client closed the request" {
		t.Fatalf("late answer: %v", err)
	}
	if err := q.Decide("never", policy.ProceedOnce); !errors.Is(err, api.ErrUnknownApproval) || errors.As(err, &ee) {
		t.Fatalf("unknown id: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ended) != 1 || ended[0].Outcome != api.OutcomeWithdrawn {
		t.Fatalf("ended: %+v", ended)
	}
}

// replayIDs reads the event stream resumed after id, and returns the ids
// of the events it replays: those it delivers before its first heartbeat
// (the fixture's hub beats after a second of silence).
func (f fixture) replayIDs(t *testing.T, after int64) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url+"/api/events", nil)
	req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := stream.NewDecoder(resp.Body)
	var ids []int64
	for {
		ev, err := dec.NextEvent()
		if err != nil {
			t.Fatalf("stream ended after %v: %v", ids, err)
		}
		if ev.Name == stream.EventHeartbeat {
			return ids
		}
		ids = append(ids, ev.ID)
	}
}
