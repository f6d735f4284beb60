package stream

import (
	"encoding/json"
	"sync"
)

// posted is an event as the hub holds it, in its memory ring, in each
// subscriber's queue and in the store's queue. The events a scheduler's
// calls produce are posted before their payload is encoded (lazy): the
// bytes are made once, by whoever first needs them — a subscriber's
// goroutine, the goroutine that persists events, a replay — so that a
// call nobody watches costs no encoding, and a call somebody watches pays
// for it off the call's path.
type posted struct {
	Event
	lazy lazyPayload // nil when Data is set
	size int64       // what the event counts against the memory ring's bound
}

// lazyPayload is a payload waiting to be encoded.
type lazyPayload interface {
	// encoded returns the payload's JSON, encoding it the first time.
	encoded(name string) json.RawMessage
}

// lazyOf is a payload of type T waiting to be encoded, in one allocation
// with what encodes it once. Its payload holds only values nobody
// modifies (strings, numbers, JSON already encoded), so it may be encoded
// at any time.
type lazyOf[T lazyType] struct {
	hub     *Hub
	once    sync.Once
	payload T
	data    json.RawMessage
}

// lazyType is what a payload posted lazily must do: say about how large
// its JSON is, so that the memory ring can bound what it holds before
// anything is encoded, and append that JSON.
type lazyType interface {
	sizeHint() int
	jsonAppender
}

func (l *lazyOf[T]) encoded(name string) json.RawMessage {
	l.once.Do(func() {
		if b, ok := l.payload.appendJSON(make([]byte, 0, l.payload.sizeHint())); ok {
			l.data = b
		} else {
			l.data = l.hub.encode(name, l.payload)
		}
		var zero T
		l.payload = zero // only the bytes are needed from now on
	})
	return l.data
}

// resolve returns the event with its payload encoded.
func (p posted) resolve() Event {
	if p.lazy != nil {
		p.Data = p.lazy.encoded(p.Name)
	}
	return p.Event
}

// payloadOverhead is what a lazily encoded payload is counted for beyond
// its strings: field names, numbers, punctuation.
const payloadOverhead = 160

func (d ToolStateData) sizeHint() int {
	return payloadOverhead + len(d.CallID) + len(d.Batch) + len(d.Server) + len(d.Tool) + len(d.Caller) + len(d.State) +
		len(d.Message) + len(d.Kind) + len(d.PreviousState)
}

func (d ToolCallData) sizeHint() int {
	n := payloadOverhead + len(d.ToolCallID) + len(d.ToolName)
	switch in := d.ToolInput.(type) {
	case encodedArgs:
		n += len(in)
	case resultInput:
		n += len(in.Result)
	default:
		n += 2 * payloadOverhead // not posted lazily by this package
	}
	return n
}

func (d ApprovalResolvedData) sizeHint() int {
	return payloadOverhead + len(d.CallID) + len(d.Batch) + len(d.Server) + len(d.Tool) + len(d.Outcome) + len(d.Message) +
		len(d.Caller) + len(d.AnsweredBy)
}

// resultInput is the tool_input of a tool_call result event: {"result":
// text}, as ToolCallResult makes it, without a map.
type resultInput struct {
	Result string `json:"result"`
}

// lazily returns an event whose payload is encoded only when someone needs
// it (see posted), for the scheduler sink's own events, whose names are
// clean and whose payloads always encode.
func lazily[T lazyType](h *Hub, name, task string, payload T) posted {
	p := posted{Event: Event{Name: name, Task: task}, lazy: &lazyOf[T]{hub: h, payload: payload}}
	p.size = int64(len(name)+len(task)+payload.sizeHint()) + eventOverhead
	return p
}

// postings are the events of one call's transition, published together.
type postings struct {
	ps [4]posted // a state, approval_resolved, an input and a result
	n  int
}

func (o *postings) add(p posted) {
	o.ps[o.n] = p
	o.n++
}

// flush publishes what was added, in order, in one turn of the hub's
// lock.
func (o *postings) flush(h *Hub) {
	if o.n > 0 {
		h.publish(o.ps[:o.n])
		o.n = 0
	}
}
