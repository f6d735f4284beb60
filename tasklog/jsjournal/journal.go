package jsjournal

import (
	"context"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolmux/toolmux/tasklog"
)

// Config says which stream holds the journal and what it keeps.
type Config struct {
	// Stream is the stream's name (default "TOOLMUX_JOURNAL").
	Stream string
	// Prefix is the subjects' prefix (default "toolmux.journal"); the
	// stream takes PREFIX.> .
	Prefix string
	// MaxAge drops records older than this (0: kept by age forever).
	MaxAge time.Duration
	// MaxBytes drops the oldest records beyond this size (0: no bound).
	MaxBytes int64
	// Duplicates is the de-duplication window of record ids (default 2m):
	// a record re-sent within it is stored once.
	Duplicates time.Duration
	// Replicas is the stream's replication in a cluster (default 1).
	Replicas int
	// Memory keeps the stream in memory instead of files (tests, caches:
	// nothing survives the server).
	Memory bool
	// MaxClaims bounds the tasks this journal holds claims on at once
	// (default 4096): Claim beyond it is a *LimitError.
	MaxClaims int
	// ScanBatch is how many records a scan fetches per request (default 256).
	ScanBatch int
	// MaxRecordBytes bounds one record (default 8 MiB, and never above
	// the server's max_payload, 1 MiB unless configured: the task log's
	// limits.max_record_bytes, 2 MiB by default, needs a server with
	// max_payload raised to match).
	MaxRecordBytes int
}

func (c *Config) defaults() {
	if c.Stream == "" {
		c.Stream = "TOOLMUX_JOURNAL"
	}
	if c.Prefix == "" {
		c.Prefix = "toolmux.journal"
	}
	if c.Duplicates <= 0 {
		c.Duplicates = 2 * time.Minute
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.MaxClaims <= 0 {
		c.MaxClaims = 4096
	}
	if c.ScanBatch <= 0 {
		c.ScanBatch = 256
	}
	if c.MaxRecordBytes <= 0 {
		c.MaxRecordBytes = 8 << 20
	}
}

// Journal is a tasklog.Journal on a JetStream stream. It is safe for
// concurrent use. Appends of one Journal keep their order; records
// appended by other processes may fall between the records of one Append
// (JetStream has no multi-message append here; see docs/fleet-notes.md).
type Journal struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	cfg    Config
	// maxRecord is the largest record: MaxRecordBytes, or the server's
	// max_payload when smaller.
	maxRecord int

	pubMu sync.Mutex // the records of one Append are published in a row

	mu     sync.Mutex
	claims map[string]*claim
	closed bool
}

// claim is this journal's hold on a task: the sequence of its claim
// message, which every record of the task is fenced by.
type claim struct {
	owner string
	seq   uint64
	lost  error // set once the server refused a write: the task is another's
}

var _ tasklog.Journal = (*Journal)(nil)

// Open creates (or updates to cfg) the journal's stream and returns the
// journal. The connection stays the caller's: Close does not close it.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Journal, error) {
	cfg.defaults()
	if !ValidToken(cfg.Stream) {
		return nil, &tasklog.ValidationError{Field: "stream", Value: cfg.Stream, Reason: "a stream name is letters, digits, '_' and '-'"}
	}
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "toolmux task log journal",
		Subjects:    []string{cfg.Prefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      cfg.MaxAge,
		MaxBytes:    orUnlimited(cfg.MaxBytes),
		MaxMsgSize:  int32(cfg.MaxRecordBytes),
		Duplicates:  cfg.Duplicates,
		Replicas:    cfg.Replicas,
		Storage:     storage,
	})
	if err != nil {
		return nil, fmt.Errorf("jsjournal: creating stream %s: %w", cfg.Stream, err)
	}
	return newJournal(js, st, cfg), nil
}

// Bind opens the journal on the stream cfg names, which must exist
// (jetstream.ErrStreamNotFound otherwise), changing nothing of it: for a
// client that may use the stream but not configure it (a fleet's member
// with credentials of its own; its gateway opened the journal).
func Bind(ctx context.Context, js jetstream.JetStream, cfg Config) (*Journal, error) {
	cfg.defaults()
	if !ValidToken(cfg.Stream) {
		return nil, &tasklog.ValidationError{Field: "stream", Value: cfg.Stream, Reason: "a stream name is letters, digits, '_' and '-'"}
	}
	st, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("jsjournal: binding stream %s: %w", cfg.Stream, err)
	}
	return newJournal(js, st, cfg), nil
}

func newJournal(js jetstream.JetStream, st jetstream.Stream, cfg Config) *Journal {
	// A record travels as one message: the connection's max_payload
	// (the server's, 1 MiB by default) bounds it too.
	maxRecord := cfg.MaxRecordBytes
	if mp := js.Conn().MaxPayload(); mp > 0 && int(mp) < maxRecord {
		maxRecord = int(mp)
	}
	return &Journal{js: js, stream: st, cfg: cfg, maxRecord: maxRecord, claims: map[string]*claim{}}
}

func orUnlimited(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// OwnershipError says that the server refused a record of a task this
// journal had claimed: another owner has claimed it since (this process
// was presumed dead). Nothing of the refused append was stored after the
// refusal; the caller must stop working on the task.
type OwnershipError struct {
	// Task is the task whose record was refused.
	Task string
	// Claim is the sequence of this journal's claim, now superseded.
	Claim uint64
	// Err is the server's answer.
	Err error
}

// Error implements the error interface.
func (e *OwnershipError) Error() string {
	return fmt.Sprintf("jsjournal: task %q is no longer ours (our claim %d was superseded): %v", e.Task, e.Claim, e.Err)
}

// Unwrap returns the server's answer.
func (e *OwnershipError) Unwrap() error { return e.Err }

// LimitError says that a bound of [Config] was reached.
type LimitError struct {
	// Limit names the bound ("max_claims").
	Limit string
	// Value is the bound.
	Value int
}

// Error implements the error interface.
func (e *LimitError) Error() string {
	return fmt.Sprintf("jsjournal: %s (%d) reached", e.Limit, e.Value)
}

// ErrClosed is returned by every method called after Close.
var ErrClosed = errors.New("jsjournal: the journal is closed")

// claimMsg is the payload of a claim.
type claimMsg struct {
	Owner string `json:"owner"`
	At    int64  `json:"at"`
}

// Claim makes this journal the owner of task: it publishes a claim on
// the task's owner subject, unconditionally (whoever hands out the task —
// the work queue's redelivery — has decided that the previous owner is
// gone), and fences every later record of the task with it. It returns the
// claim's sequence. A previous owner's later writes are refused.
func (j *Journal) Claim(ctx context.Context, task, owner string) (uint64, error) {
	return j.claim(ctx, task, owner, nil)
}

// Renew re-publishes this journal's claim of task if, and only if, no one
// has claimed the task since (compare-and-set on the owner subject), so
// that the claim stays within the stream's MaxAge while the task lives.
// A claim lost meanwhile is an *OwnershipError.
func (j *Journal) Renew(ctx context.Context, task string) (uint64, error) {
	j.mu.Lock()
	c, ok := j.claims[task]
	j.mu.Unlock()
	if !ok {
		return 0, &OwnershipError{Task: task, Err: errors.New("no claim held")}
	}
	if c.lost != nil {
		return 0, c.lost
	}
	seq := c.seq
	return j.claim(ctx, task, c.owner, &seq)
}

func (j *Journal) claim(ctx context.Context, task, owner string, prev *uint64) (uint64, error) {
	if task == "" {
		return 0, &tasklog.ValidationError{Field: "task", Reason: "a claim is of a task"}
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return 0, ErrClosed
	}
	if _, held := j.claims[task]; !held && len(j.claims) >= j.cfg.MaxClaims {
		j.mu.Unlock()
		return 0, &LimitError{Limit: "max_claims", Value: j.cfg.MaxClaims}
	}
	j.mu.Unlock()
	b, _ := json.Marshal(claimMsg{Owner: owner, At: time.Now().UnixNano()})
	var opts []jetstream.PublishOpt
	if prev != nil {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(*prev))
	}
	ack, err := j.js.Publish(ctx, j.ownSubject(task), b, opts...)
	if err != nil {
		if prev != nil && wrongLastSeq(err) {
			oe := &OwnershipError{Task: task, Claim: *prev, Err: err}
			j.markLost(task, *prev, oe)
			return 0, oe
		}
		return 0, fmt.Errorf("jsjournal: claiming task %q: %w", task, err)
	}
	j.mu.Lock()
	j.claims[task] = &claim{owner: owner, seq: ack.Sequence}
	j.mu.Unlock()
	return ack.Sequence, nil
}

// DecidesOwnership tells tasklog.Open that this journal decides who owns
// a task (claims, handed out by the fleet's work queue): a Log over it
// does not mark the tasks of dead processes of its host interrupted.
func (j *Journal) DecidesOwnership() bool { return true }

// Release forgets this journal's claim of task (its run is over or handed
// back): later records of the task are appended unfenced.
func (j *Journal) Release(task string) {
	j.mu.Lock()
	delete(j.claims, task)
	j.mu.Unlock()
}

func (j *Journal) markLost(task string, seq uint64, err error) {
	j.mu.Lock()
	if c, ok := j.claims[task]; ok && c.seq == seq && c.lost == nil {
		c.lost = err
	}
	j.mu.Unlock()
}

// wrongLastSeq reports whether err is JetStream's "wrong last sequence"
// (10071; 10164 from replicated streams).
func wrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// Append implements tasklog.Journal. Each payload is a record; it is
// published with its id as Nats-Msg-Id and, when its task is claimed by
// this journal, fenced by the claim. The records of one call are
// published in a row and acknowledged together; the position returned is
// the first's stream sequence (the original's, for a duplicate).
func (j *Journal) Append(ctx context.Context, payloads ...[]byte) (tasklog.Pos, error) {
	type sent struct {
		task  string
		fence uint64
		fut   jetstream.PubAckFuture
	}
	msgs := make([]*nats.Msg, len(payloads))
	out := make([]sent, len(payloads))
	optsOf := make([][]jetstream.PublishOpt, len(payloads))
	heads := make([]tasklog.RecordHead, len(payloads))
	for i, p := range payloads {
		if len(p) > j.maxRecord {
			return 0, &tasklog.ValidationError{Field: "record", Value: fmt.Sprintf("%d bytes", len(p)), Reason: fmt.Sprintf("larger than the journal's %d-byte record", j.maxRecord)}
		}
		h, err := tasklog.ParseRecordHead(p)
		if err != nil {
			return 0, err
		}
		heads[i] = h
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return 0, ErrClosed
	}
	for i, p := range payloads {
		h := heads[i]
		msgs[i] = &nats.Msg{Subject: j.recSubject(h.Task), Data: p}
		opts := []jetstream.PublishOpt{jetstream.WithMsgID(h.ID)}
		if c, ok := j.claims[h.Task]; ok && h.Task != "" {
			if c.lost != nil {
				j.mu.Unlock()
				return 0, c.lost
			}
			opts = append(opts, jetstream.WithExpectLastSequenceForSubject(c.seq, j.ownSubject(h.Task)))
			out[i].fence = c.seq
		}
		out[i].task = h.Task
		optsOf[i] = opts
	}
	j.mu.Unlock()

	j.pubMu.Lock()
	for i, m := range msgs {
		fut, err := j.js.PublishMsgAsync(m, optsOf[i]...)
		if err != nil {
			j.pubMu.Unlock()
			// Those already sent may still be stored: the caller's retry
			// re-sends them with the same ids, and they are stored once.
			return 0, fmt.Errorf("jsjournal: appending: %w", err)
		}
		out[i].fut = fut
	}
	j.pubMu.Unlock()

	var first tasklog.Pos
	var errs []error
	for i, s := range out {
		select {
		case ack := <-s.fut.Ok():
			if i == 0 {
				first = tasklog.Pos(ack.Sequence)
			}
		case err := <-s.fut.Err():
			if s.fence != 0 && wrongLastSeq(err) {
				oe := &OwnershipError{Task: s.task, Claim: s.fence, Err: err}
				j.markLost(s.task, s.fence, oe)
				err = oe
			} else {
				err = fmt.Errorf("jsjournal: appending: %w", err)
			}
			errs = append(errs, err)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if len(errs) > 0 {
		return 0, errs[0]
	}
	return first, nil
}

// maxEmptyFetches bounds the empty answers a scan takes while its
// consumer says records are pending.
const maxEmptyFetches = 100

// Scan implements tasklog.Journal with an ephemeral consumer from from
// (a stream sequence; 0 is the first), deleted when the scan ends.
func (j *Journal) Scan(ctx context.Context, from tasklog.Pos, fn func(pos tasklog.Pos, payload []byte) bool) (tasklog.Pos, error) {
	if j.isClosed() {
		return from, ErrClosed
	}
	info, err := j.stream.Info(ctx)
	if err != nil {
		return from, fmt.Errorf("jsjournal: %w", err)
	}
	last := info.State.LastSeq
	start := max(uint64(from), 1)
	if start > last {
		return from, nil
	}
	cons, err := j.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		AckPolicy:         jetstream.AckNonePolicy,
		FilterSubject:     j.cfg.Prefix + ".rec.>",
		InactiveThreshold: time.Minute, // the server's clean-up if this process dies mid-scan
		MemoryStorage:     true,
	})
	if err != nil {
		return from, fmt.Errorf("jsjournal: scanning: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = j.stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
		cancel()
	}()
	pos := from
	empty := 0
	for {
		if err := ctx.Err(); err != nil {
			return pos, err
		}
		batch, err := cons.FetchNoWait(j.cfg.ScanBatch)
		if err != nil {
			return pos, fmt.Errorf("jsjournal: scanning: %w", err)
		}
		// A scan that ends in the middle of a batch lets the fetch
		// finish (the server answers a no-wait fetch at once), so that
		// nothing of it outlives the scan.
		defer drainBatch(batch)
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return pos, fmt.Errorf("jsjournal: scanning: %w", err)
			}
			seq := md.Sequence.Stream
			pos = tasklog.Pos(seq + 1)
			if !fn(tasklog.Pos(seq), m.Data()) {
				return pos, nil
			}
			if seq >= last {
				return pos, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return pos, fmt.Errorf("jsjournal: scanning: %w", err)
		}
		if n == 0 {
			// An empty answer is trusted only when the consumer says
			// nothing is pending: a scan that skipped a record would
			// move the index past it for good.
			ci, err := cons.Info(ctx)
			if err != nil {
				return pos, fmt.Errorf("jsjournal: scanning: %w", err)
			}
			if ci.NumPending > 0 {
				if empty++; empty > maxEmptyFetches {
					return pos, fmt.Errorf("jsjournal: scanning: %d records pending but none delivered", ci.NumPending)
				}
				continue
			}
			// Nothing left as of the start of the scan: the rest up to
			// last are claims, which are not records.
			return max(pos, tasklog.Pos(last+1)), nil
		}
		empty = 0
	}
}

// ReadAt implements tasklog.Journal: the message at pos, or a
// *tasklog.GoneError when the stream's limits dropped it.
func (j *Journal) ReadAt(ctx context.Context, pos tasklog.Pos) ([]byte, error) {
	if j.isClosed() {
		return nil, ErrClosed
	}
	m, err := j.stream.GetMsg(ctx, uint64(pos))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, &tasklog.GoneError{Pos: pos}
	}
	if err != nil {
		return nil, fmt.Errorf("jsjournal: reading record %d: %w", uint64(pos), err)
	}
	if !j.isRecSubject(m.Subject) {
		return nil, fmt.Errorf("jsjournal: no journal record at %d (a %s message)", uint64(pos), m.Subject)
	}
	return m.Data, nil
}

// End implements tasklog.Journal: the stream's last sequence plus one.
func (j *Journal) End(ctx context.Context) (tasklog.Pos, error) {
	if j.isClosed() {
		return 0, ErrClosed
	}
	info, err := j.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("jsjournal: %w", err)
	}
	return tasklog.Pos(info.State.LastSeq + 1), nil
}

// Close implements tasklog.Journal: it forgets the claims and refuses
// later calls; the connection and the stream stay.
func (j *Journal) Close() error {
	j.mu.Lock()
	j.closed = true
	j.claims = map[string]*claim{}
	j.mu.Unlock()
	return nil
}

func (j *Journal) isClosed() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.closed
}

func (j *Journal) recSubject(task string) string { return j.cfg.Prefix + ".rec." + Token(task) }
func (j *Journal) ownSubject(task string) string { return j.cfg.Prefix + ".own." + Token(task) }

func (j *Journal) isRecSubject(s string) bool {
	p := j.cfg.Prefix + ".rec."
	return len(s) > len(p) && s[:len(p)] == p
}

var tokenEnc = base32.HexEncoding.WithPadding(base32.NoPadding)

// Token is task as one subject token: the id itself when it is letters,
// digits, '-' and '_' not in first place (toolmux's ids are), else "_"
// and its base32 (hex alphabet), so that no two tasks share a token and
// none holds '.', '*', '>' or white space. "" is "_".
func Token(task string) string {
	if task != "" && task[0] != '_' && ValidToken(task) {
		return task
	}
	return "_" + tokenEnc.EncodeToString([]byte(task))
}

// ValidToken reports whether s may be used as one subject token, or a
// stream or bucket name: letters, digits, '-' and '_', not empty.
func ValidToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// drainBatch reads what is left of a fetch, for at most 5s (a connection
// gone mid-fetch ends it with an error sooner).
func drainBatch(b jetstream.MessageBatch) {
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case _, ok := <-b.Messages():
			if !ok {
				return
			}
		case <-t.C:
			return
		}
	}
}

// String is for logs.
func (j *Journal) String() string {
	return "jetstream:" + j.cfg.Stream + " (" + strconv.Quote(j.cfg.Prefix) + ")"
}
