package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/tool"
)

// The call ledger makes a resumed run safe for tools with side effects.
// Every call is written to the ledger as started before it runs and as
// completed, with its record, after. A resumed run runs its last turn's
// calls again under the same ids (agent.WithResume); the ledger then
//   - reuses the record of a completed call (nothing runs again);
//   - refuses a call that started and never completed, with
//     outcome_unknown, unless the tool is safe to repeat (its server
//     declared it read-only or idempotent), which runs again.
//
// The ledger is the innermost middleware (pipeline.WithMiddleware), just
// before the manager: a call refused by the layers above never started.

// ledgerEntry is a call as the ledger keeps it.
type ledgerEntry struct {
	State   string       `json:"state"` // started or completed
	Run     string       `json:"run"`
	Worker  string       `json:"worker"`
	Server  string       `json:"server"`
	Tool    string       `json:"tool"`
	Started time.Time    `json:"started"`
	Record  *tool.Record `json:"record,omitempty"`
	// Cut: the record was too large for the ledger and kept without its
	// result's content.
	Cut bool `json:"cut,omitempty"`
}

const (
	ledgerStarted   = "started"
	ledgerCompleted = "completed"
	// maxLedgerRecord bounds a record kept in the ledger (a KV value is
	// one message, within the server's max_payload).
	maxLedgerRecord = 512 << 10
)

// LedgerOptions adjust the ledger.
type LedgerOptions struct {
	// Worker names who writes the entries.
	Worker string
	// Safe says whether a call may run twice; nil: when its definition
	// says read-only or idempotent.
	Safe func(call *tool.Call) bool
	// Logger receives diagnostics (default: discarded).
	Logger *slog.Logger
}

// Ledger is the call ledger of a fleet.
type Ledger struct {
	kv  jetstream.KeyValue
	o   LedgerOptions
	log *slog.Logger
}

// Ledger returns the fleet's call ledger.
func (f *Fleet) Ledger(o LedgerOptions) *Ledger {
	if o.Safe == nil {
		o.Safe = SafeToRepeat
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Ledger{kv: f.ledger, o: o, log: log}
}

// SafeToRepeat is true for a call whose tool declares itself read-only or
// idempotent.
func SafeToRepeat(call *tool.Call) bool {
	d := call.Def()
	if d == nil {
		return false
	}
	a := d.Annotations
	return a.ReadOnly != nil && *a.ReadOnly || a.Idempotent != nil && *a.Idempotent
}

// Middleware is the ledger as a pipeline middleware.
func (l *Ledger) Middleware(next pipeline.Handler) pipeline.Handler {
	return pipeline.HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
		if call.ID == "" || call.Task == "" {
			return next.Call(ctx, call)
		}
		k := "c." + key(call.ID)
		prior, rev, err := l.get(ctx, k)
		if err != nil {
			// The ledger cannot be read: running the call could repeat it.
			return tool.Refused(&call, &tool.Error{Kind: tool.KindExecutionFailed, Server: call.Server, Tool: call.Tool,
				Message: "the call ledger could not be read, so the call was not run: " + err.Error(), Err: err})
		}
		if prior != nil {
			switch {
			case prior.State == ledgerCompleted && prior.Record != nil:
				rec := *prior.Record
				rec.Note("ledger", "the call completed in an earlier attempt of the run (worker "+prior.Worker+"); its record is reused", nil)
				return &rec
			case !l.o.Safe(&call):
				msg := fmt.Sprintf("this call started on worker %s at %s and never reported back (the worker stopped); "+
					"%s is not declared idempotent, so it was not run again and its outcome is unknown",
					prior.Worker, prior.Started.Format(time.RFC3339), tool.ExposedName(call.Server, call.Tool))
				if prior.State == ledgerCompleted {
					msg = "this call completed in an earlier attempt of the run, but its result was too large to keep; it was not run again"
				}
				return tool.Refused(&call, &tool.Error{Kind: tool.KindOutcomeUnknown, Server: call.Server, Tool: call.Tool, Message: msg})
			}
		}
		e := ledgerEntry{State: ledgerStarted, Run: call.Task, Worker: l.o.Worker, Server: call.Server, Tool: call.Tool, Started: time.Now().UTC()}
		b, _ := json.Marshal(e)
		if prior == nil {
			_, err = l.kv.Create(ctx, k, b)
		} else {
			_, err = l.kv.Update(ctx, k, b, rev)
		}
		if err != nil {
			// Another attempt wrote first, or the ledger is down: either
			// way running it is not known to be safe.
			return tool.Refused(&call, &tool.Error{Kind: tool.KindExecutionFailed, Server: call.Server, Tool: call.Tool,
				Message: "the call could not be entered in the call ledger, so it was not run: " + err.Error(), Err: err})
		}
		rec := next.Call(ctx, call)
		if cutShort(ctx, rec) {
			// The run was cancelled under the call (a worker draining
			// past its grace, a lease lost): the tool may have had its
			// effect, so the call stays started. A resumed run is told
			// its outcome is unknown, or runs it again when that is safe;
			// "cancelled" kept as its outcome would be reused instead.
			l.log.Info("a call cut short by its run's end stays started in the ledger", "call", call.ID, "task", call.Task)
			return rec
		}
		l.complete(ctx, k, e, rec)
		return rec
	})
}

// cutShort reports whether rec is a call ended by the cancellation of
// its context rather than by the tool.
func cutShort(ctx context.Context, rec *tool.Record) bool {
	if ctx.Err() == nil || rec == nil || rec.Error == nil {
		return false
	}
	return rec.Error.Kind == tool.KindCancelled || rec.Error.Kind == tool.KindTimeout
}

// complete records a call's end. A failure to write it leaves the call
// started: a resumed run will not repeat it, the safe side.
func (l *Ledger) complete(ctx context.Context, k string, e ledgerEntry, rec *tool.Record) {
	e.State, e.Record = ledgerCompleted, rec
	b, err := json.Marshal(e)
	if err == nil && len(b) > maxLedgerRecord {
		e.Record, e.Cut = nil, true
		b, err = json.Marshal(e)
	}
	if err != nil {
		l.log.Warn("could not encode a call for the ledger", "call", rec.ID, "error", err)
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := l.kv.Put(wctx, k, b); err != nil {
		l.log.Warn("could not record a call's end in the ledger", "call", rec.ID, "error", err)
	}
}

func (l *Ledger) get(ctx context.Context, k string) (*ledgerEntry, uint64, error) {
	e, err := l.kv.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var le ledgerEntry
	if err := json.Unmarshal(e.Value(), &le); err != nil {
		return nil, 0, fmt.Errorf("ledger entry %s: %w", k, err)
	}
	return &le, e.Revision(), nil
}
