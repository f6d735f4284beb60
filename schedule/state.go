package schedule

import (
	"time"

	"github.com/toolmux/toolmux/tool"
)

// State is where a call is in its life. A call moves forward only:
//
//	validating → scheduled → [awaiting_approval →] executing → success | error | cancelled
//
// and may end early (error or cancelled) from any state before executing.
type State string

// The states of a call.
const (
	// Validating: the scheduler is finding the tool's definition and asking
	// the policy what to do with the call.
	Validating State = "validating"
	// Scheduled: the call is admitted and waits for its turn: earlier
	// mutating calls to finish, or a free slot.
	Scheduled State = "scheduled"
	// AwaitingApproval: the policy said ask; an approver is deciding.
	AwaitingApproval State = "awaiting_approval"
	// Executing: the call is in the pipeline or the tool.
	Executing State = "executing"
	// Success: the tool answered without error.
	Success State = "success"
	// Error: the call failed or the tool reported an error; the record
	// carries the kind.
	Error State = "error"
	// Cancelled: the call was cancelled (the batch, the call, or its context)
	// before or while it ran.
	Cancelled State = "cancelled"
)

// Terminal reports whether s is a final state.
func (s State) Terminal() bool { return s == Success || s == Error || s == Cancelled }

// Transition is one state change of a call, with the time it happened.
type Transition struct {
	State State     `json:"state"`
	Time  time.Time `json:"time"`
}

// EventType says what an Event reports.
type EventType string

// The types of events.
const (
	// EventState: the call entered Event.State.
	EventState EventType = "state"
	// EventOutput: live output of a running tool (a shell command's
	// stdout or stderr), in Event.Stream and Event.Chunk.
	EventOutput EventType = "output"
	// EventProgress: a progress report of a running tool, in
	// Event.Progress.
	EventProgress EventType = "progress"
)

// Event is what the scheduler tells its Sink: a state transition of one
// call, or something a running call produced.
type Event struct {
	Type EventType `json:"type"`
	// Batch identifies the batch, Call the call within it (tool.Call.ID),
	// Index its position in the batch as the model issued it.
	Batch  string `json:"batch"`
	Call   string `json:"call"`
	Index  int    `json:"index"`
	Task   string `json:"task,omitempty"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Caller is the name of who made the call (tool.Call.Caller); ""
	// when no authentication is configured.
	Caller string    `json:"caller,omitempty"`
	Time   time.Time `json:"time"`
	// State is the state entered, for EventState.
	State State `json:"state,omitempty"`
	// Previous is the state left, for EventState ("" for the first
	// state), PreviousAt when the call entered it, and FirstAt when the
	// call entered its first state: how long each state lasted, without
	// a sink having to remember the call.
	Previous   State     `json:"previous_state,omitempty"`
	PreviousAt time.Time `json:"previous_at,omitzero"`
	FirstAt    time.Time `json:"first_at,omitzero"`
	// Arguments are the call's arguments, on state events: what a UI shows
	// of a call, and what an approval question is about. Not to be
	// modified.
	Arguments map[string]any `json:"arguments,omitempty"`
	// Message says why, for awaiting_approval (the policy's message) and
	// for error and cancelled states (the error's message).
	Message string `json:"message,omitempty"`
	// AnsweredBy names who answered the call's approval question, on the
	// state event that leaves awaiting_approval, when the approver said
	// (tool.Answered).
	AnsweredBy string `json:"answered_by,omitempty"`
	// Record is the call's record, on terminal states.
	Record *tool.Record `json:"record,omitempty"`
	// Stream ("stdout", "stderr") and Chunk, for EventOutput.
	Stream string `json:"stream,omitempty"`
	Chunk  string `json:"chunk,omitempty"`
	// Progress, for EventProgress.
	Progress *tool.Progress `json:"progress,omitempty"`
}

// Sink receives the events of every batch. Events of one call arrive in
// order; events of different calls interleave. Event is called on the
// scheduler's goroutines and must return quickly: a slow sink slows the
// calls down, it does not lose events.
type Sink interface {
	Event(Event)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(Event)

// Event calls f.
func (f SinkFunc) Event(e Event) { f(e) }

// Outcome is what one call of a batch came to.
type Outcome struct {
	// Call is the call as the scheduler ran it (with its ID filled in).
	Call tool.Call `json:"call"`
	// Record is its record: the result or the error with its kind. Never nil.
	Record *tool.Record `json:"record"`
	// State is the final state: success, error or cancelled.
	State State `json:"state"`
	// Transitions are the states the call went through, in order, with
	// their times.
	Transitions []Transition `json:"transitions"`
}
