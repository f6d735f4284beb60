// Package tasklog is toolmux's durable task log: for every task, its
// status, timestamps, input and final answer, its step logs, the message
// history of each agent session, the record of every tool call, and the
// stream events a reconnecting client replays. docs/tasklog.md describes
// it whole.
//
// Its durable core is an append-only journal (DATA_DIR/journal: segment
// files of CRC-checked frames, or a JetStream stream with [WithJournal]):
// every write is appended once, as one self-describing JSON record, and
// nothing is ever rewritten (the defect of MiroFlow's TaskLog, which
// rewrote one JSON file every turn). An append returns once the record is
// as durable as [WithDurability] says, so a call's record is in the
// journal before its result is returned, and still there after kill -9;
// appends of one process are committed in groups. [Log.Export] still
// produces MiroFlow's JSON shape on demand.
//
// Queries read an index (SQLite, journal/index.db) that is built from the
// journal off the call's path — in the background and before every
// query, so a read after a write sees it — and rebuilt from the journal
// when it is lost or of another version.
//
// Retention ([WithRetention]) bounds what the log keeps, by age and by
// size: it drops the oldest segments whole, carrying the start, steps and
// messages of tasks still running forward, and the spill files of results
// cut for the model.
//
// A *Log is safe for concurrent use by many goroutines, and several
// processes may open the same directory: appends take turns on the
// journal's flock, catching up the index on SQLite's write lock.
//
// *Log implements pipeline.Recorder (Record(ctx, *tool.Record)), so the
// governance pipeline hands it every call's record, and
// [Log.StreamStore] is the stream hub's event store.
package tasklog
