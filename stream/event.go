package stream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolmux/toolmux/tool"
)

// Event is one published event. Its fields are exactly those of the task
// log's event (ID, Name, Task, Time, Data, in that order), so one converts
// to the other with a type conversion and the task log can serve as a Store
// through a small adapter, without either package importing the other.
type Event struct {
	// ID increases by one with every event a Hub publishes; a client
	// resumes after the last ID it saw. Markers that are not stored events
	// (gap, heartbeat) have ID 0.
	ID int64
	// Name is the event's name, the SSE "event:" field: one of the Event*
	// constants, or a name of the publisher's own.
	Name string
	// Task is the task the event belongs to ("" for events of no task);
	// subscribers filter on it.
	Task string
	// Time is when the event was published, in UTC.
	Time time.Time
	// Data is the event's payload, a JSON value (an object for every event
	// this package defines).
	Data json.RawMessage
}

// The names of the events. The first nine are MiroFlow's, with its payloads
// field for field; the rest are toolmux's own.
const (
	// EventStartOfWorkflow opens a workflow (one task run): StartOfWorkflowData.
	EventStartOfWorkflow = "start_of_workflow"
	// EventEndOfWorkflow closes it: EndOfWorkflowData.
	EventEndOfWorkflow = "end_of_workflow"
	// EventStartOfAgent: an agent (the main one or a sub-agent) starts: AgentData.
	EventStartOfAgent = "start_of_agent"
	// EventEndOfAgent: that agent has finished: AgentData.
	EventEndOfAgent = "end_of_agent"
	// EventStartOfLLM: an agent asks its model: LLMData.
	EventStartOfLLM = "start_of_llm"
	// EventEndOfLLM: the model has answered: LLMData.
	EventEndOfLLM = "end_of_llm"
	// EventMessage: text of the model's answer, a delta at a time: MessageData.
	EventMessage = "message"
	// EventToolCall: a tool call's input, then (a second event with the same
	// tool_call_id) its result: ToolCallData.
	EventToolCall = "tool_call"
	// EventShowError: an error that ends the workflow: ErrorData.
	EventShowError = "show_error"

	// EventToolState: a call entered a scheduler state: ToolStateData.
	EventToolState = "tool_state"
	// EventToolOutput: live output or a progress report of a running call:
	// ToolOutputData.
	EventToolOutput = "tool_output"
	// EventApprovalRequest: a call waits for a person's approval:
	// ApprovalRequestData.
	EventApprovalRequest = "approval_request"
	// EventApprovalResolved: the wait is over — approved, denied or
	// cancelled: ApprovalResolvedData.
	EventApprovalResolved = "approval_resolved"
	// EventHeartbeat: the SSE connection is alive; written by the SSE
	// handler when it has sent nothing for a while, never stored:
	// HeartbeatData.
	EventHeartbeat = "heartbeat"
	// EventGap: events this subscriber should have received were lost;
	// never stored: GapData.
	EventGap = "gap"
)

// Names returns the name of every event this package defines, in the order
// of the constants.
func Names() []string {
	return []string{EventStartOfWorkflow, EventEndOfWorkflow, EventStartOfAgent, EventEndOfAgent,
		EventStartOfLLM, EventEndOfLLM, EventMessage, EventToolCall, EventShowError,
		EventToolState, EventToolOutput, EventApprovalRequest, EventApprovalResolved,
		EventHeartbeat, EventGap}
}

// NewPayload returns a pointer to a new zero payload of the type the event
// name carries (*StartOfWorkflowData for start_of_workflow, ...), or nil
// for a name this package does not define.
func NewPayload(name string) any {
	switch name {
	case EventStartOfWorkflow:
		return new(StartOfWorkflowData)
	case EventEndOfWorkflow:
		return new(EndOfWorkflowData)
	case EventStartOfAgent, EventEndOfAgent:
		return new(AgentData)
	case EventStartOfLLM, EventEndOfLLM:
		return new(LLMData)
	case EventMessage:
		return new(MessageData)
	case EventToolCall:
		return new(ToolCallData)
	case EventShowError:
		return new(ErrorData)
	case EventToolState:
		return new(ToolStateData)
	case EventToolOutput:
		return new(ToolOutputData)
	case EventApprovalRequest:
		return new(ApprovalRequestData)
	case EventApprovalResolved:
		return new(ApprovalResolvedData)
	case EventHeartbeat:
		return new(HeartbeatData)
	case EventGap:
		return new(GapData)
	}
	return nil
}

// DecodeData decodes the event's payload into its type (see NewPayload)
// and returns the pointer. Fields it does not know are ignored, so a newer
// server's events still decode. For a name this package does not define it
// returns an *UnknownEventError.
func (e Event) DecodeData() (any, error) {
	p := NewPayload(e.Name)
	if p == nil {
		return nil, &UnknownEventError{Name: e.Name}
	}
	if err := json.Unmarshal(e.Data, p); err != nil {
		return nil, fmt.Errorf("stream: decoding %s payload: %w", e.Name, err)
	}
	return p, nil
}

// envelope is the JSON form of an Event: MiroFlow's {"event", "data"} with
// id, task and time added.
type envelope struct {
	ID    int64           `json:"id,omitempty"`
	Event string          `json:"event"`
	Task  string          `json:"task,omitempty"`
	Time  time.Time       `json:"time,omitzero"`
	Data  json.RawMessage `json:"data"`
}

// MarshalJSON writes the envelope {"id", "event", "task", "time", "data"};
// id is left out for markers (ID 0) and task for events of no task.
func (e Event) MarshalJSON() ([]byte, error) {
	data := e.Data
	if len(bytes.TrimSpace(data)) == 0 {
		data = emptyObject
	}
	return json.Marshal(envelope{ID: e.ID, Event: e.Name, Task: e.Task, Time: e.Time, Data: data})
}

// UnmarshalJSON reads the envelope MarshalJSON writes.
func (e *Event) UnmarshalJSON(b []byte) error {
	var v envelope
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*e = Event{ID: v.ID, Name: v.Event, Task: v.Task, Time: v.Time, Data: v.Data}
	return nil
}

var emptyObject = json.RawMessage(`{}`)

// InputMessage is one message of a workflow's input.
type InputMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// StartOfWorkflowData is the payload of start_of_workflow.
type StartOfWorkflowData struct {
	WorkflowID string         `json:"workflow_id"`
	Input      []InputMessage `json:"input"`
}

// StartOfWorkflow returns the payload announcing workflow id for the
// user's input, as MiroFlow sends it: one user message.
func StartOfWorkflow(workflowID, input string) StartOfWorkflowData {
	return StartOfWorkflowData{WorkflowID: workflowID, Input: []InputMessage{{Role: "user", Content: input}}}
}

// EndOfWorkflowData is the payload of end_of_workflow.
type EndOfWorkflowData struct {
	WorkflowID string `json:"workflow_id"`
}

// EndOfWorkflow returns the payload closing workflow id.
func EndOfWorkflow(workflowID string) EndOfWorkflowData {
	return EndOfWorkflowData{WorkflowID: workflowID}
}

// AgentData is the payload of start_of_agent and end_of_agent.
type AgentData struct {
	AgentName   string `json:"agent_name"`
	DisplayName string `json:"display_name"`
	AgentID     string `json:"agent_id"`
}

// Agent returns the payload of start_of_agent or end_of_agent. An empty
// display name is the agent's name, as in MiroFlow.
func Agent(name, displayName, agentID string) AgentData {
	if displayName == "" {
		displayName = name
	}
	return AgentData{AgentName: name, DisplayName: displayName, AgentID: agentID}
}

// LLMData is the payload of start_of_llm and end_of_llm.
type LLMData struct {
	AgentName   string `json:"agent_name"`
	DisplayName string `json:"display_name"`
}

// LLM returns the payload of start_of_llm or end_of_llm; an empty display
// name is the agent's name.
func LLM(agentName, displayName string) LLMData {
	if displayName == "" {
		displayName = agentName
	}
	return LLMData{AgentName: agentName, DisplayName: displayName}
}

// MessageDelta is the text a message event adds.
type MessageDelta struct {
	Content string `json:"content"`
}

// MessageData is the payload of message: a piece of the model's answer,
// appended by the client to the message with the same id.
type MessageData struct {
	MessageID string       `json:"message_id"`
	Delta     MessageDelta `json:"delta"`
}

// Message returns the payload adding content to message id.
func Message(messageID, content string) MessageData {
	return MessageData{MessageID: messageID, Delta: MessageDelta{Content: content}}
}

// ToolCallData is the payload of tool_call. The first event of a call
// carries the arguments in ToolInput (or, when the model streams them, a
// series of events each carrying one argument in DeltaInput); the result
// is a second event with the same ToolCallID and ToolInput {"result": text}.
type ToolCallData struct {
	ToolCallID string `json:"tool_call_id"`
	ToolName   string `json:"tool_name"`
	// ToolInput is the arguments, or {"result": text} for the result.
	ToolInput any `json:"tool_input,omitempty"`
	// DeltaInput is one streamed argument, {name: value}.
	DeltaInput any `json:"delta_input,omitempty"`
}

// ToolCallInput returns the payload of a call's first tool_call event; nil
// arguments are sent as {} so the field is always there.
func ToolCallInput(callID, toolName string, args map[string]any) ToolCallData {
	if args == nil {
		args = map[string]any{}
	}
	return ToolCallData{ToolCallID: callID, ToolName: toolName, ToolInput: args}
}

// ToolCallDelta returns the payload streaming one argument of a call.
func ToolCallDelta(callID, toolName, key string, value any) ToolCallData {
	return ToolCallData{ToolCallID: callID, ToolName: toolName, DeltaInput: map[string]any{key: value}}
}

// ToolCallResult returns the payload of a call's result event.
func ToolCallResult(callID, toolName, result string) ToolCallData {
	return ToolCallData{ToolCallID: callID, ToolName: toolName, ToolInput: map[string]any{"result": result}}
}

// ErrorData is the payload of show_error.
type ErrorData struct {
	Error string `json:"error"`
}

// ShowError returns the payload of show_error. MiroFlow's clients stop
// reading the workflow after it.
func ShowError(message string) ErrorData { return ErrorData{Error: message} }

// ToolStateData is the payload of tool_state: a call of a batch entered a
// scheduler state (validating, scheduled, awaiting_approval, executing,
// success, error, cancelled).
type ToolStateData struct {
	// CallID is the call's id (tool.Call.ID), also the tool_call_id of its
	// tool_call events.
	CallID string `json:"call_id"`
	// Batch is the scheduler's batch, Index the call's position in it.
	Batch string `json:"batch"`
	Index int    `json:"index"`
	// Server and Tool name the tool.
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Caller is the name of who made the call; absent when no
	// authentication is configured.
	Caller string `json:"caller,omitempty"`
	// State is the state entered.
	State string `json:"state"`
	// Message is the approval question (awaiting_approval) or the error's
	// message (error, cancelled).
	Message string `json:"message,omitempty"`
	// Kind is the error's kind, on error and cancelled.
	Kind string `json:"kind,omitempty"`
	// PreviousState is the state left, "" for the first.
	PreviousState string `json:"previous_state,omitempty"`
	// PreviousMS is how long the call was in PreviousState, TotalMS how
	// long since it entered its first state, in milliseconds.
	PreviousMS float64 `json:"previous_ms"`
	TotalMS    float64 `json:"total_ms"`
}

// ToolOutputData is the payload of tool_output: something a running call
// produced before its result — a chunk of a shell command's output
// (Stream and Chunk) or an MCP server's progress report (Progress).
type ToolOutputData struct {
	CallID   string         `json:"call_id"`
	Batch    string         `json:"batch"`
	Index    int            `json:"index"`
	Server   string         `json:"server"`
	Tool     string         `json:"tool"`
	Stream   string         `json:"stream,omitempty"`
	Chunk    string         `json:"chunk,omitempty"`
	Progress *tool.Progress `json:"progress,omitempty"`
}

// ApprovalRequestData is the payload of approval_request: a call waits for
// a person to approve or deny it. The answer goes back through whatever
// approver the gate has (the terminal, the HTTP API), keyed by CallID.
type ApprovalRequestData struct {
	CallID string `json:"call_id"`
	Batch  string `json:"batch"`
	Index  int    `json:"index"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Caller is the name of who made the call; absent when no
	// authentication is configured.
	Caller string `json:"caller,omitempty"`
	// Arguments are the call's arguments, when the publisher knows them.
	Arguments map[string]any `json:"arguments,omitempty"`
	// Message is the question to show.
	Message string `json:"message"`
	// Rule names the policy rule that asked, when the publisher knows it.
	Rule string `json:"rule,omitempty"`
}

// The outcomes of an approval request.
const (
	// OutcomeApproved: the call may run.
	OutcomeApproved = "approved"
	// OutcomeDenied: the call was refused (by a person, by the policy, or
	// because nobody could be asked).
	OutcomeDenied = "denied"
	// OutcomeCancelled: the call was cancelled while it waited.
	OutcomeCancelled = "cancelled"
)

// ApprovalResolvedData is the payload of approval_resolved, which follows
// every approval_request of the same call: the outcome, so a UI can take
// the request off the screen whoever answered it.
type ApprovalResolvedData struct {
	CallID string `json:"call_id"`
	Batch  string `json:"batch"`
	Index  int    `json:"index"`
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Outcome is OutcomeApproved, OutcomeDenied or OutcomeCancelled.
	Outcome string `json:"outcome"`
	// Message is the refusal's message, when the call did not proceed.
	Message string `json:"message,omitempty"`
	// WaitedMS is how long the call waited, in milliseconds.
	WaitedMS float64 `json:"waited_ms"`
	// Caller names who made the call, and AnsweredBy who answered its
	// question, when callers are known (authentication is configured)
	// and the approver said.
	Caller     string `json:"caller,omitempty"`
	AnsweredBy string `json:"answered_by,omitempty"`
}

// HeartbeatData is the payload of heartbeat.
type HeartbeatData struct {
	// Time is when the heartbeat was sent.
	Time time.Time `json:"time"`
	// LastEventID is the id of the last event this connection delivered
	// (0 if none), the id to resume from.
	LastEventID int64 `json:"last_event_id"`
}

// The reasons for a gap.
const (
	// GapSlow: the subscriber's buffer was full; the events were published
	// while it did not read.
	GapSlow = "slow"
	// GapExpired: the events asked for in a replay are older than anything
	// the hub still holds (no store, or the memory ring has moved on).
	GapExpired = "expired"
	// GapReplayFailed: reading the store during a replay failed.
	GapReplayFailed = "replay_failed"
)

// GapData is the payload of gap: events between FromID and ToID (both
// included) that matched the subscription were not delivered. A client
// that needs them reconnects with Last-Event-ID FromID-1 to have them
// replayed from the store.
type GapData struct {
	// Missed is how many events were lost. For GapSlow it is exact; for
	// GapExpired and GapReplayFailed it is the size of the id range, an
	// upper bound when a filter is in use.
	Missed int64 `json:"missed"`
	FromID int64 `json:"from_id"`
	ToID   int64 `json:"to_id"`
	// Reason is GapSlow, GapExpired or GapReplayFailed.
	Reason string `json:"reason"`
	// Error is the store's error, for GapReplayFailed.
	Error string `json:"error,omitempty"`
}
