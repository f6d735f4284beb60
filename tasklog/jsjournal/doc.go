// Package jsjournal is a [tasklog.Journal] on a NATS JetStream stream: the
// journal of a fleet of toolmux workers (issue 15, SPEC §13 and §14).
//
// It is a package of its own so that nats.go stays out of the
// single-machine build: nothing imports it until the fleet's commands do,
// and a user who never passes --nats installs and sees nothing new.
//
// The mapping (docs/fleet-notes.md says why):
//
//   - each record is one message; its subject is PREFIX.rec.TASK (TASK the
//     record's task as a subject token, "_" for records of no task), its
//     Nats-Msg-Id the record's id, so a record sent twice (a retry after a
//     lost acknowledgement) is stored once, within the stream's
//     de-duplication window;
//   - a record's position is its stream sequence; a scan is an ephemeral
//     consumer filtered on PREFIX.rec.>, deleted when the scan ends;
//   - retention is the stream's limits (MaxAge, MaxBytes, discard old); a
//     record they dropped reads as a *tasklog.GoneError;
//   - ownership is a fence: [Journal.Claim] publishes a claim on
//     PREFIX.own.TASK, and every later record of that task this journal
//     appends carries Nats-Expected-Last-Subject-Sequence (the claim's
//     sequence) for that subject. Another claim of the task moves the
//     subject on, so the server refuses the previous owner's writes
//     (an *[OwnershipError]), atomically with the write itself.
package jsjournal
