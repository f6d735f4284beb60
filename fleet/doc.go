// Package fleet runs agent runs on many machines through NATS JetStream:
// a work queue of runs that workers take, hold by a lease they renew
// while the run lives, and hand back (or lose, when they die) to another
// worker, which resumes the run from its journal; a bucket of run states
// that submitters and the page read; the runs' events on a stream the
// submitter and the page follow; and a call ledger that keeps a
// non-idempotent tool from running twice when a run is resumed.
//
// A fleet's members may connect with nkeys of their own rather than one
// shared token (members.go, perms.go, creds.go): the NATS server holds
// each to its role, a submitter queues its runs on a subject naming its
// key, and the worker that takes a run runs it for that submitter, the
// caller of its name and groups (identity.With), as the gateway would.
//
// Nothing here is a queue of toolmux's own: redelivery, acknowledgements,
// de-duplication, compare-and-set and retention are JetStream's. The task
// log's journal on JetStream is package tasklog/jsjournal. docs/fleet.md
// has the subjects, streams and buckets, and what survives what.
package fleet
