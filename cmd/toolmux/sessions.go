package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/tasklog"
)

// sessionLog records the gateway's client sessions as tasks of the task
// log: a session's task is named after its client and route, and ends
// with the session as closed, idle or shutdown.
type sessionLog struct {
	log    *tasklog.Log
	logger *slog.Logger
}

// sessionTasks is the gateway's SessionLog for a task log; nil without
// one.
func sessionTasks(l *tasklog.Log, logger *slog.Logger) gateway.SessionLog {
	if l == nil {
		return nil
	}
	return sessionLog{log: l, logger: logger}
}

// taskWriteTimeout bounds one write of a session's start or end.
const taskWriteTimeout = 10 * time.Second

func (s sessionLog) SessionStarted(ctx context.Context, sess gateway.Session) {
	client := sess.ClientName
	if client == "" {
		client = "an MCP client"
	}
	if sess.ClientVersion != "" {
		client += " " + sess.ClientVersion
	}
	// A client of protocol 2026-07-28 over HTTP has no session: its task
	// holds the calls of its identity on the route.
	input, kind := "MCP session of "+client+" on "+sess.Route, "mcp_session"
	if sess.Sessionless {
		input, kind = "MCP calls of "+client+" on "+sess.Route+" (protocol "+sess.Protocol+", no session)", "mcp_client"
	}
	ctx, cancel := context.WithTimeout(ctx, taskWriteTimeout)
	defer cancel()
	err := s.log.StartTask(ctx, tasklog.Task{ID: sess.Task, Created: sess.Started, Caller: sess.Caller,
		Input: input,
		Metadata: map[string]any{"kind": kind, "route": sess.Route, "protocol": sess.Protocol,
			"client": map[string]any{"name": sess.ClientName, "version": sess.ClientVersion}}})
	if err != nil {
		s.logger.Warn("task log: could not record a session's start", "task", sess.Task, "error", err)
	}
}

func (s sessionLog) SessionEnded(ctx context.Context, sess gateway.Session, end gateway.SessionEnd) {
	status := tasklog.StatusClosed
	switch end.How {
	case gateway.EndIdle:
		status = tasklog.StatusIdle
	case gateway.EndShutdown:
		status = tasklog.StatusShutdown
	}
	ctx, cancel := context.WithTimeout(ctx, taskWriteTimeout)
	defer cancel()
	if err := s.log.FinishTask(ctx, sess.Task, status, end.Message); err != nil {
		s.logger.Warn("task log: could not record a session's end", "task", sess.Task, "error", err)
	}
}

// Reissued records a re-issued request answered from its first execution
// as a step of the call's task: the call ran once, and has one record.
func (s sessionLog) Reissued(ctx context.Context, r gateway.Reissued) {
	if r.Task == "" {
		return
	}
	msg := "re-issued request answered from the first execution of " + r.Server + "/" + r.Tool + " (request id " + r.RequestID + ")"
	switch {
	case r.Running:
		msg += "; it was still running: the re-issue waited for it"
	case r.AfterGrace:
		msg += "; it had been cancelled after the grace (reissue.grace) once sent to the server, which may have acted: the re-issue got an outcome_unknown error"
	case !r.Kept:
		msg += "; its result was too large to keep: the re-issue got an outcome_unknown error"
	}
	ctx, cancel := context.WithTimeout(ctx, taskWriteTimeout)
	defer cancel()
	err := s.log.Step(ctx, r.Task, tasklog.Step{Name: "re-issued request", Message: msg, Time: r.At,
		Metadata: map[string]any{"kind": "mcp_reissue", "route": r.Route, "server": r.Server, "tool": r.Tool,
			"request_id": r.RequestID, "running": r.Running, "kept": r.Kept, "after_grace": r.AfterGrace}})
	if err != nil {
		s.logger.Warn("task log: could not record a re-issued request", "task", r.Task, "error", err)
	}
}

// finishOwned ends, as shutdown, the tasks this process still runs as it
// stops, so that none is left running.
func (a *app) finishOwned(l *tasklog.Log) {
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), taskWriteTimeout)
	defer cancel()
	if _, err := l.FinishOwned(ctx, tasklog.StatusShutdown, "toolmux stopped while the task ran"); err != nil {
		a.logger().Warn("task log: could not end the tasks left running", "error", err)
	}
}
