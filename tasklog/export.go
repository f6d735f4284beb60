package tasklog

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/toolmux/toolmux/tool"
)

// TaskDetail is everything the log holds about one task.
type TaskDetail struct {
	Task
	// Steps is the step log, in order.
	Steps []Step `json:"steps"`
	// Sessions holds each session's history, in the order the sessions
	// began.
	Sessions []SessionHistory `json:"sessions"`
	// Calls holds every call record, in the order the calls started.
	Calls []*tool.Record `json:"calls"`
}

// Detail returns everything about one task, read as one consistent
// snapshot, or a [*NotFoundError].
func (l *Log) Detail(ctx context.Context, id string) (*TaskDetail, error) {
	var d *TaskDetail
	err := l.read(ctx, func(tx *sql.Tx) error {
		t, err := readTask(ctx, tx, id)
		if err != nil {
			return err
		}
		d = &TaskDetail{Task: *t}
		if d.Steps, err = readSteps(ctx, tx, id); err != nil {
			return err
		}
		sessions, err := readSessions(ctx, tx, id)
		if err != nil {
			return err
		}
		d.Sessions = make([]SessionHistory, 0, len(sessions))
		for _, s := range sessions {
			msgs, err := readMessages(ctx, tx, id, s)
			if err != nil {
				return err
			}
			d.Sessions = append(d.Sessions, SessionHistory{Session: s, Messages: msgs})
		}
		d.Calls, err = l.readCalls(ctx, tx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// ExportVersion is the version of the export format, in every export's
// toolmux_export_version.
const ExportVersion = 1

// ExportTask is a task in the JSON shape of MiroFlow's task log (its
// TaskLog/TaskTracer file), so tools written for those files read it:
// task_id, status, input, final_boxed_answer, main_agent_message_history
// and sub_agent_message_history_sessions ({system_prompt,
// message_history}), step_logs ({step_name, message, info_level,
// timestamp, metadata}), and the tool calls MiroFlow kept as
// tool_calls_data. Statuses keep toolmux's names (success, not completed);
// times are RFC 3339.
type ExportTask struct {
	Version          int            `json:"toolmux_export_version"`
	TaskID           string         `json:"task_id"`
	Status           Status         `json:"status"`
	StartTime        time.Time      `json:"start_time"`
	EndTime          time.Time      `json:"end_time,omitzero"`
	UpdatedTime      time.Time      `json:"updated_time"`
	Input            string         `json:"input"`
	FinalBoxedAnswer string         `json:"final_boxed_answer"`
	Metadata         map[string]any `json:"metadata"`
	// MainAgentMessageHistory is the MainSession's history.
	MainAgentMessageHistory ExportHistory `json:"main_agent_message_history"`
	// SubAgentMessageHistorySessions holds every other session's history,
	// by session name.
	SubAgentMessageHistorySessions map[string]ExportHistory `json:"sub_agent_message_history_sessions"`
	StepLogs                       []ExportStep             `json:"step_logs"`
	ToolCalls                      []ExportCall             `json:"tool_calls"`
}

// ExportHistory is one session's history, MiroFlow-style: a first system
// message whose content is a string becomes system_prompt, the rest is
// message_history.
type ExportHistory struct {
	SystemPrompt   string    `json:"system_prompt"`
	MessageHistory []Message `json:"message_history"`
}

// ExportStep is one step log entry, under MiroFlow's names.
type ExportStep struct {
	StepName  string         `json:"step_name"`
	Message   string         `json:"message"`
	InfoLevel Level          `json:"info_level"`
	Timestamp time.Time      `json:"timestamp"`
	Metadata  map[string]any `json:"metadata"`
}

// ExportCall is one tool call: MiroFlow's tool_calls_data fields
// (server_name, tool_name, arguments, result or error, duration_ms,
// call_time) and the rest of toolmux's record.
type ExportCall struct {
	CallID       string         `json:"call_id"`
	Session      string         `json:"session,omitempty"`
	ServerName   string         `json:"server_name"`
	ToolName     string         `json:"tool_name"`
	ExposedName  string         `json:"exposed_name,omitempty"`
	Arguments    map[string]any `json:"arguments"`
	Result       *tool.Result   `json:"result,omitempty"`
	Error        *tool.Error    `json:"error,omitempty"`
	DurationMS   float64        `json:"duration_ms"`
	CallTime     time.Time      `json:"call_time"`
	EndTime      time.Time      `json:"end_time"`
	Attempts     int            `json:"attempts"`
	Notes        []tool.Note    `json:"notes,omitempty"`
	Verdict      *tool.Verdict  `json:"verdict,omitempty"`
	Instructions []string       `json:"instructions,omitempty"`
}

// Export returns one task as an indented [ExportTask] JSON document, or a
// [*NotFoundError].
func (l *Log) Export(ctx context.Context, id string) ([]byte, error) {
	d, err := l.Detail(ctx, id)
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(d.Export(), "", "  ")
}

// Export converts the detail to the export shape.
func (d *TaskDetail) Export() *ExportTask {
	e := &ExportTask{
		Version:                        ExportVersion,
		TaskID:                         d.ID,
		Status:                         d.Status,
		StartTime:                      d.Created,
		EndTime:                        d.Ended,
		UpdatedTime:                    d.Updated,
		Input:                          d.Input,
		FinalBoxedAnswer:               d.FinalAnswer,
		Metadata:                       d.Metadata,
		MainAgentMessageHistory:        ExportHistory{MessageHistory: []Message{}},
		SubAgentMessageHistorySessions: map[string]ExportHistory{},
		StepLogs:                       make([]ExportStep, 0, len(d.Steps)),
		ToolCalls:                      make([]ExportCall, 0, len(d.Calls)),
	}
	if e.Metadata == nil {
		e.Metadata = map[string]any{}
	}
	for _, s := range d.Sessions {
		h := exportHistory(s.Messages)
		if s.Session == MainSession {
			e.MainAgentMessageHistory = h
		} else {
			e.SubAgentMessageHistorySessions[s.Session] = h
		}
	}
	for _, s := range d.Steps {
		meta := s.Metadata
		if meta == nil {
			meta = map[string]any{}
		}
		e.StepLogs = append(e.StepLogs, ExportStep{StepName: s.Name, Message: s.Message, InfoLevel: s.Level, Timestamp: s.Time, Metadata: meta})
	}
	for _, r := range d.Calls {
		e.ToolCalls = append(e.ToolCalls, ExportCall{
			CallID: r.ID, Session: r.Session, ServerName: r.Server, ToolName: r.Tool, ExposedName: r.Name,
			Arguments: r.Arguments, Result: r.Result, Error: r.Error,
			DurationMS: float64(r.Duration.Microseconds()) / 1000,
			CallTime:   r.Started, EndTime: r.Ended, Attempts: r.Attempts,
			Notes: r.Notes, Verdict: r.Verdict, Instructions: r.Instructions,
		})
	}
	return e
}

func exportHistory(msgs []Message) ExportHistory {
	h := ExportHistory{MessageHistory: msgs}
	if len(msgs) > 0 && msgs[0].Role == "system" {
		var prompt string
		if json.Unmarshal(msgs[0].Content, &prompt) == nil {
			h.SystemPrompt, h.MessageHistory = prompt, msgs[1:]
		}
	}
	if h.MessageHistory == nil {
		h.MessageHistory = []Message{}
	}
	return h
}
