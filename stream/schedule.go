package stream

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/toolmux/toolmux/internal/bound"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/tool"
)

// DefaultResultLimit bounds the result text a tool_call result event
// carries (64 KiB): the stream is for watching, the task log keeps the
// whole record.
const DefaultResultLimit = 64 << 10

// DefaultArgumentLimit bounds the arguments a tool_call input event or an
// approval_request carries (about their JSON size, 64 KiB), and the
// texts of tool_state and tool_output events.
const DefaultArgumentLimit = 64 << 10

// maxTracked bounds the calls a ScheduleSink remembers at once (announced
// and not ended), so that calls announced but never run cannot grow it
// without end.
const maxTracked = 16384

// SinkOption configures a ScheduleSink.
type SinkOption func(*ScheduleSink)

// WithResultLimit sets how many bytes of a result's text a tool_call
// result event carries (default DefaultResultLimit); longer text is cut at
// a character boundary and marked.
func WithResultLimit(n int) SinkOption {
	return func(k *ScheduleSink) {
		if n > 0 {
			k.limit = n
		}
	}
}

// WithArgumentLimit sets about how many bytes of arguments (their JSON) a
// tool_call input event or an approval_request carries, and how many bytes
// of a message, an output chunk or a progress message a tool_state or
// tool_output event carries (default DefaultArgumentLimit). Longer strings
// keep their start and end around a marker, objects and arrays past the
// limit lose their last elements for a marker, and values nested deeper
// than tool.DefaultMaxDepth levels are replaced by one.
func WithArgumentLimit(n int) SinkOption {
	return func(k *ScheduleSink) {
		if n > 0 {
			k.argLimit = n
		}
	}
}

// ScheduleSink is a schedule.Sink publishing a scheduler's events to a
// Hub, for toolmux's UI and for MiroFlow's:
//
//   - every state transition as tool_state, with the time spent in the
//     state left and since the first state;
//   - awaiting_approval also as approval_request, and the next transition
//     of that call as approval_resolved (executing: approved; error:
//     denied; cancelled: cancelled);
//   - live output and progress of a running call as tool_output;
//   - MiroFlow's pair of tool_call events per call, tool_call_id being the
//     call's id and tool_name its exposed name (server__tool): the input
//     when the call starts executing, and the result ({"result": text, or
//     "kind: message" for a failure}) when it ends.
//
// A schedule.Event does not carry the call's arguments. Announce the calls
// (with their IDs set) before running them, and the tool_call input event
// is published when the call starts executing, with approval_request
// showing the arguments too; a call that was not announced gets its input
// event just before its result, with the arguments of its record (as
// repaired by the pipeline).
type ScheduleSink struct {
	hub      *Hub
	limit    int
	argLimit int

	mu    sync.Mutex
	calls map[string]*tracked
	// announced counts the announced calls not ended: while there are
	// none, the scheduler's events are published without remembering
	// anything.
	announced atomic.Int64
}

var _ schedule.Sink = (*ScheduleSink)(nil)

// tracked is what the sink remembers about one call between its events.
type tracked struct {
	args        map[string]any
	announced   bool           // args are known
	viaAnnounce bool           // by Announce
	first       time.Time      // first state entered
	since       time.Time      // current state entered
	state       schedule.State // current state, "" before the first
	started     bool           // the tool_call input event was published
}

// SchedulerSink returns a sink publishing a scheduler's events to h; pass
// it to schedule.WithSink.
func SchedulerSink(h *Hub, opts ...SinkOption) *ScheduleSink {
	k := &ScheduleSink{hub: h, limit: DefaultResultLimit, argLimit: DefaultArgumentLimit, calls: make(map[string]*tracked)}
	for _, o := range opts {
		if o != nil {
			o(k)
		}
	}
	return k
}

// Announce tells the sink the arguments of calls about to be run, by their
// IDs (calls without an ID are skipped: the scheduler would give them one
// the sink cannot know).
func (k *ScheduleSink) Announce(calls ...tool.Call) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range calls {
		if c.ID == "" {
			continue
		}
		t := k.entry(c.ID)
		t.args, t.announced = k.bound(c.Arguments), true
		if !t.viaAnnounce {
			t.viaAnnounce = true
			k.announced.Add(1)
		}
	}
}

// forget drops a call's entry; k.mu is held.
func (k *ScheduleSink) forget(id string, t *tracked) {
	if t.viaAnnounce {
		k.announced.Add(-1)
	}
	delete(k.calls, id)
}

// entry returns the call's entry, making room when the bound is reached by
// forgetting calls that were announced but never seen; k.mu is held.
func (k *ScheduleSink) entry(id string) *tracked {
	if t, ok := k.calls[id]; ok {
		return t
	}
	if len(k.calls) >= maxTracked {
		for cid, t := range k.calls {
			if t.state == "" {
				k.forget(cid, t)
				if len(k.calls) < maxTracked/2 {
					break
				}
			}
		}
	}
	t := &tracked{}
	k.calls[id] = t
	return t
}

// Event publishes e; it implements schedule.Sink. It never blocks.
func (k *ScheduleSink) Event(e schedule.Event) {
	switch e.Type {
	case schedule.EventState:
		k.state(e)
	case schedule.EventOutput, schedule.EventProgress:
		p := e.Progress
		if p != nil && len(p.Message) > k.argLimit {
			c := *p
			c.Message = truncate(c.Message, k.argLimit)
			p = &c
		}
		k.hub.Publish(EventToolOutput, e.Task, ToolOutputData{CallID: e.Call, Batch: e.Batch, Index: e.Index,
			Server: e.Server, Tool: e.Tool, Stream: e.Stream, Chunk: truncate(e.Chunk, k.argLimit), Progress: p})
	}
}

func (k *ScheduleSink) state(e schedule.Event) {
	at := e.Time
	if at.IsZero() {
		at = time.Now()
	}
	msg := truncate(e.Message, k.argLimit)
	prev, prevSince, first := e.Previous, e.PreviousAt, e.FirstAt
	var args map[string]any
	var startNow, startLate, bounded bool
	if e.FirstAt.IsZero() || k.announced.Load() > 0 {
		// The event does not say what came before, or calls were
		// announced: the sink remembers the call.
		args, startNow, startLate = k.track(e, at, &prev, &prevSince, &first)
		bounded = true
	} else {
		// A scheduler's event says everything: nothing to remember. Its
		// input event is published when it starts executing, or with its
		// result when it never did.
		args = e.Arguments
		startNow = e.State == schedule.Executing && args != nil
		startLate = e.State.Terminal() && prev != schedule.Executing
	}

	st := ToolStateData{CallID: e.Call, Batch: e.Batch, Index: e.Index, Server: e.Server, Tool: e.Tool, Caller: e.Caller,
		State: string(e.State), Message: msg, PreviousState: string(prev), TotalMS: ms(at.Sub(first))}
	if prev != "" {
		st.PreviousMS = ms(at.Sub(prevSince))
	}
	if e.Record != nil && e.Record.Error != nil {
		st.Kind = string(e.Record.Error.Kind)
	}
	// The events of one transition are published together: one turn of
	// the hub's lock for all of them.
	var out postings
	out.add(lazily(k.hub, EventToolState, e.Task, st))

	if prev == schedule.AwaitingApproval && e.State != schedule.AwaitingApproval {
		r := ApprovalResolvedData{CallID: e.Call, Batch: e.Batch, Index: e.Index, Server: e.Server, Tool: e.Tool,
			Outcome: OutcomeApproved, WaitedMS: ms(at.Sub(prevSince)), Caller: e.Caller, AnsweredBy: e.AnsweredBy}
		switch e.State {
		case schedule.Cancelled:
			r.Outcome, r.Message = OutcomeCancelled, msg
		case schedule.Error:
			r.Outcome, r.Message = OutcomeDenied, msg
		}
		out.add(lazily(k.hub, EventApprovalResolved, e.Task, r))
	}
	if e.State == schedule.AwaitingApproval || startNow || startLate {
		if startLate && args == nil && e.Record != nil {
			args, bounded = e.Record.Arguments, false
		}
		if !bounded {
			args = k.bound(args)
		}
	}
	if e.State == schedule.AwaitingApproval {
		// Rare, and it carries the arguments: encoded now, after what
		// came before it.
		out.flush(k.hub)
		k.hub.Publish(EventApprovalRequest, e.Task, ApprovalRequestData{CallID: e.Call, Batch: e.Batch,
			Index: e.Index, Server: e.Server, Tool: e.Tool, Caller: e.Caller, Arguments: args, Message: msg})
	}
	if startNow || startLate {
		out.add(k.input(e, args))
	}
	if e.State.Terminal() {
		out.add(lazily(k.hub, EventToolCall, e.Task, ToolCallData{ToolCallID: e.Call, ToolName: tool.ExposedName(e.Server, e.Tool),
			ToolInput: resultInput{Result: k.resultText(e)}}))
	}
	out.flush(k.hub)
}

// input returns a call's tool_call input event. The arguments are the
// caller's, who may change them once the call has ended: they are encoded
// now, the rest of the payload when someone needs it.
func (k *ScheduleSink) input(e schedule.Event, args map[string]any) posted {
	raw := encodedArgs(emptyObject)
	if args != nil {
		if b, ok := appendValue(make([]byte, 0, 64), args); ok {
			raw = b
		} else {
			raw = encodedArgs(k.hub.encode(EventToolCall, args))
		}
	}
	return lazily(k.hub, EventToolCall, e.Task, ToolCallData{ToolCallID: e.Call, ToolName: tool.ExposedName(e.Server, e.Tool),
		ToolInput: raw})
}

// track remembers the call between its events, for events that do not
// say what came before and for announced calls; it fills in the previous
// state, when it was entered and when the call began (unless the event
// said), and returns the call's arguments (cut to the limit) and whether
// its input event is due now, or late with its result.
func (k *ScheduleSink) track(e schedule.Event, at time.Time, prev *schedule.State, prevSince, first *time.Time) (args map[string]any, startNow, startLate bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t, known := k.calls[e.Call]
	if !known {
		t = k.entry(e.Call)
		// A call first seen mid-way (calls were announced meanwhile)
		// has had its input published if it has executed.
		t.started = e.Previous == schedule.Executing
	}
	if e.FirstAt.IsZero() {
		*prev, *prevSince = t.state, t.since
		if t.first.IsZero() {
			t.first = at
		}
		*first = t.first
	}
	t.state, t.since = e.State, at
	if !t.announced && e.Arguments != nil {
		// The scheduler's state events carry the arguments: no Announce
		// needed.
		t.args, t.announced = k.bound(e.Arguments), true
	}
	args = t.args
	startNow = e.State == schedule.Executing && t.announced && !t.started
	startLate = e.State.Terminal() && !t.started
	if startNow {
		t.started = true
	}
	if e.State.Terminal() {
		k.forget(e.Call, t)
	}
	return args, startNow, startLate
}

// bound returns args cut to the argument limit (copied only if cut), so
// that no event carries more of them, however large or deep they are.
func (k *ScheduleSink) bound(args map[string]any) map[string]any {
	if args == nil {
		return nil
	}
	f := bound.Fitter{MaxDepth: tool.DefaultMaxDepth}
	f.Value(args)
	budget := k.argLimit
	out, _ := bound.Cut(args, f.Cap(k.argLimit), tool.DefaultMaxDepth, &budget)
	m, _ := out.(map[string]any)
	return m
}

// resultText is what a tool_call result shows: the result's text, or the
// error as "kind: message" (with the tool's own text for a tool_error).
func (k *ScheduleSink) resultText(e schedule.Event) string {
	rec := e.Record
	var s string
	switch {
	case rec == nil:
		s = e.Message
	case rec.Error != nil:
		s = string(rec.Error.Kind) + ": " + rec.Error.Message
		if rec.Error.Suggestion != "" {
			s += " (did you mean " + rec.Error.Suggestion + "?)"
		}
		if text := rec.Result.Text(); text != "" && text != rec.Error.Message {
			s += "\n" + text
		}
	default:
		s = rec.Result.Text()
	}
	return truncate(s, k.limit)
}

// truncate cuts s to at most limit bytes at a character boundary and says
// how much was cut.
func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "\n[… " + strconv.Itoa(len(s)-cut) + " more bytes not shown]"
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
