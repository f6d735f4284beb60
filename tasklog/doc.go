// Package tasklog is toolmux's durable task log: one embedded SQLite file
// (tasklog.db in the data directory) holding, for every task, its status,
// timestamps, input and final answer, its step logs, the message history of
// each agent session, the record of every tool call, and the stream events
// a reconnecting client replays.
//
// Everything is appended as it happens, one small transaction per write, so
// a crash loses at most the write in flight; nothing rewrites a task (the
// defect of MiroFlow's TaskLog, which rewrote one JSON file every turn).
// [Log.Export] still produces that JSON shape on demand.
//
// A *Log is safe for concurrent use by many goroutines, and several
// processes may open the same file: SQLite's write-ahead log lets readers
// run alongside the one writer, and a busy timeout makes writers of
// different processes take turns.
//
// *Log implements pipeline.Recorder (Record(ctx, *tool.Record)), so the
// governance pipeline hands it every call's record.
//
// Retention is out of scope: nothing is ever deleted. The foreign keys
// cascade, so deleting a task row removes its steps, messages and calls,
// which is what a later retention policy needs.
package tasklog
