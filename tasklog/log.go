package tasklog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// FileName is the name of the database file inside the data directory.
const FileName = "tasklog.db"

// Durability says what a committed write survives.
type Durability int

const (
	// DurabilityFull syncs the write-ahead log to disk on every commit: a
	// write that returned survives a crash of the process, of the operating
	// system and a power cut. The default.
	DurabilityFull Durability = iota
	// DurabilityProcess skips that sync: a write that returned survives a
	// crash of the process (the operating system still holds it), but the
	// last writes may be lost if the machine goes down. Faster, and the
	// database is never corrupted either way.
	DurabilityProcess
)

// Option configures a Log.
type Option func(*options)

type options struct {
	log           *slog.Logger
	busyTimeout   time.Duration
	durability    Durability
	readers       int
	recordTimeout time.Duration
	retryDelay    time.Duration
	now           func() time.Time
}

// WithLogger sets where write failures of [Log.Record] are reported (they
// have no caller to return an error to). Default: discarded.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithBusyTimeout sets how long a write waits for another process holding
// the write lock before failing (default 10s).
func WithBusyTimeout(d time.Duration) Option { return func(o *options) { o.busyTimeout = d } }

// WithDurability sets what a committed write survives (default
// [DurabilityFull]).
func WithDurability(d Durability) Option { return func(o *options) { o.durability = d } }

// WithReaders sets how many read connections may be open at once
// (default 4). Reads never wait for the writer.
func WithReaders(n int) Option { return func(o *options) { o.readers = n } }

// WithRecordTimeout bounds each write attempt of [Log.Record] (default
// 30s). Record ignores the cancellation of the call's context — a
// cancelled call must still be recorded — so this is its only bound.
func WithRecordTimeout(d time.Duration) Option { return func(o *options) { o.recordTimeout = d } }

// WithClock replaces time.Now for the times the log fills in itself
// (updated_at, ended_at, defaults for zero times). For tests.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// Log is a task log backed by one SQLite file. It is safe for concurrent
// use; see the package documentation.
type Log struct {
	owner owner // this process, recorded on the tasks it runs
	path  string
	w     *sql.DB // one connection: writes are serialised in the process
	r     *sql.DB // readers, concurrent with the writer (WAL)
	opts  options
	log   *slog.Logger
	done  chan struct{} // closed by Close
	once  sync.Once
	// ops hands writes to the writer goroutine, which closes stopped when
	// it ends; prepared holds the hot statements, used only by the writer.
	ops      chan *writeOp
	stopped  chan struct{}
	prepared map[string]*sql.Stmt
	cerr     error
	state    atomic.Bool // true once closed
	stats    struct {
		recorded, retried, lost atomic.Uint64
		mu                      sync.Mutex
		lastErr                 string
	}
}

// Open opens (creating it if needed) the task log in dir, creating dir with
// mode 0700 and the file with mode 0600 (task logs hold inputs, arguments
// and results), and migrates its schema to the newest version. A file
// written by a newer toolmux is refused with a [*VersionError].
//
// Every task records the process that runs it. Open marks interrupted the
// tasks left running by a process of this machine that has died (killed,
// crashed), with a warning step saying so; tasks of live processes (which
// may share the file) and of other machines are left alone. Tasks written
// before owners were recorded count as dead after an hour without a write.
func Open(ctx context.Context, dir string, opts ...Option) (*Log, error) {
	o := options{
		log:           slog.New(slog.DiscardHandler),
		busyTimeout:   10 * time.Second,
		readers:       4,
		recordTimeout: 30 * time.Second,
		retryDelay:    50 * time.Millisecond,
		now:           time.Now,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if o.readers < 1 {
		o.readers = 1
	}
	if dir == "" {
		return nil, &ValidationError{Field: "dir", Reason: "a data directory is needed"}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tasklog: %w", err)
	}
	path := filepath.Join(dir, FileName)
	if strings.ContainsAny(path, "?#") {
		// The driver reads everything after '?' as connection parameters.
		return nil, &ValidationError{Field: "dir", Value: dir, Reason: "must not contain '?' or '#'"}
	}
	// Create the file ourselves so its mode is 0600; SQLite gives the -wal
	// and -shm files the mode of the database file.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("tasklog: %w", err)
	}
	f.Close()

	l := &Log{owner: self(), path: path, opts: o, log: o.log, done: make(chan struct{})}
	syncMode := "FULL"
	if o.durability == DurabilityProcess {
		syncMode = "NORMAL"
	}
	base := url.Values{}
	base.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", o.busyTimeout.Milliseconds()))
	base.Add("_pragma", "foreign_keys(1)")
	base.Add("_pragma", "synchronous("+syncMode+")")

	wq := cloneValues(base)
	wq.Add("_pragma", "journal_mode(WAL)")
	// BEGIN IMMEDIATE takes the write lock up front, so the busy timeout
	// applies; a deferred transaction upgrading to a write in WAL mode gets
	// SQLITE_BUSY at once, without waiting.
	wq.Set("_txlock", "immediate")
	l.w, err = sql.Open("sqlite", path+"?"+wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("tasklog: %w", err)
	}
	l.w.SetMaxOpenConns(1)
	l.w.SetMaxIdleConns(1)
	l.w.SetConnMaxLifetime(0)
	l.w.SetConnMaxIdleTime(0)

	rq := cloneValues(base)
	rq.Add("_pragma", "query_only(1)")
	l.r, err = sql.Open("sqlite", path+"?"+rq.Encode())
	if err != nil {
		l.w.Close()
		return nil, fmt.Errorf("tasklog: %w", err)
	}
	l.r.SetMaxOpenConns(o.readers)
	l.r.SetMaxIdleConns(o.readers)

	l.ops = make(chan *writeOp)
	l.stopped = make(chan struct{})
	go l.writer()
	if err := l.migrate(ctx); err != nil {
		l.Close()
		return nil, err
	}
	if err := l.prepare(ctx); err != nil {
		l.Close()
		return nil, err
	}
	if ids, err := l.recoverOrphans(ctx); err != nil {
		l.log.Warn("tasklog: could not mark the tasks of dead processes interrupted", "error", err)
	} else if len(ids) > 0 {
		l.log.Info("tasklog: tasks of processes that died marked interrupted", "tasks", ids)
	}
	return l, nil
}

func cloneValues(v url.Values) url.Values {
	c := url.Values{}
	for k, vs := range v {
		c[k] = append([]string(nil), vs...)
	}
	return c
}

// Path returns the database file's path.
func (l *Log) Path() string { return l.path }

// Close stops the writer goroutine and closes the database connections.
// Writes the writer has taken finish first; every later call returns
// [ErrClosed], and a later Record is counted as lost. Close is idempotent.
func (l *Log) Close() error {
	l.once.Do(func() {
		l.state.Store(true)
		close(l.done)
		<-l.stopped
		for _, st := range l.prepared {
			st.Close()
		}
		l.cerr = errors.Join(l.w.Close(), l.r.Close())
	})
	return l.cerr
}

func (l *Log) closed() bool { return l.state.Load() }

// writeOp is one write waiting for the writer goroutine.
type writeOp struct {
	fn   func(tx *sql.Tx) error
	done chan error
}

// maxBatch caps how many writes share one transaction.
const maxBatch = 128

// write runs fn in a write transaction and returns when it is committed
// (or failed). fn runs on the writer goroutine and must be repeatable: a
// batch that fails is rolled back and each of its writes run again alone.
//
// ctx bounds the wait for the writer; once the writer has taken the
// write, write waits for its outcome, so the error returned is true (the
// statements still honour ctx).
func (l *Log) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if l.closed() {
		return ErrClosed
	}
	op := &writeOp{fn: fn, done: make(chan error, 1)}
	select {
	case l.ops <- op:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.done:
		return ErrClosed
	}
	return <-op.done
}

// writer is the one goroutine that writes. It commits the writes waiting
// at the same time in one transaction (group commit): one lock, one sync
// to disk for all of them, which is what makes concurrent writers fast
// with full durability. A lone write gets its own transaction at once;
// nothing waits to fill a batch.
func (l *Log) writer() {
	defer close(l.stopped)
	batch := make([]*writeOp, 0, maxBatch)
	for {
		select {
		case op := <-l.ops:
			batch = append(batch[:0], op)
		case <-l.done:
			return
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case op := <-l.ops:
				batch = append(batch, op)
			default:
				break drain
			}
		}
		l.commit(batch)
		clear(batch)
	}
}

// commit runs a batch in one transaction. If one of its writes fails, the
// batch is rolled back and every write runs again in a transaction of its
// own, so a write fails only for its own reasons. If the transaction could
// not begin or commit, every write of the batch gets that error (running
// them again one by one would only wait the busy timeout once per write).
func (l *Log) commit(batch []*writeOp) {
	opFailed, err := l.runTx(func(tx *sql.Tx) error {
		for _, op := range batch {
			if err := op.fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || !opFailed || len(batch) == 1 {
		for _, op := range batch {
			op.done <- err
		}
		return
	}
	for _, op := range batch {
		_, err := l.runTx(op.fn)
		op.done <- err
	}
}

// runTx runs fn in one transaction (BEGIN IMMEDIATE); opFailed says that
// fn, not BEGIN or COMMIT, returned the error.
func (l *Log) runTx(fn func(tx *sql.Tx) error) (opFailed bool, err error) {
	// The transaction is the writer's, never cancelled: statements honour
	// their own write's context, and a cancelled statement fails its batch,
	// whose other writes then run again.
	tx, err := l.w.BeginTx(context.Background(), nil)
	if err != nil {
		return false, l.dbErr(err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return true, l.dbErr(err)
	}
	if err := tx.Commit(); err != nil {
		return false, l.dbErr(err)
	}
	return false, nil
}

// exec runs one of the statements prepared at Open inside tx, so the hot
// writes are not parsed again each time.
func (l *Log) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	if st, ok := l.prepared[query]; ok {
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, query, args...)
}

// prepare prepares the statements exec runs most, on the writer's one
// connection.
func (l *Log) prepare(ctx context.Context) error {
	l.prepared = map[string]*sql.Stmt{}
	for _, q := range []string{qEnsureTask, qInsertCall, qInsertStep, qInsertMessage, qInsertEvent} {
		st, err := l.w.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("tasklog: preparing statements: %w", err)
		}
		l.prepared[q] = st
	}
	return nil
}

// read runs fn in one read transaction, so what it reads is one snapshot.
func (l *Log) read(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if l.closed() {
		return ErrClosed
	}
	tx, err := l.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return l.dbErr(err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to lose
	return l.dbErr(fn(tx))
}

// dbErr maps database/sql's "closed" to ErrClosed and prefixes the rest;
// typed errors of this package pass through.
func (l *Log) dbErr(err error) error {
	if err == nil {
		return nil
	}
	var (
		nf *NotFoundError
		ae *AmbiguousError
		ve *ValidationError
		de *DuplicateEventError
		vv *VersionError
	)
	switch {
	case errors.As(err, &nf), errors.As(err, &ae), errors.As(err, &ve), errors.As(err, &de), errors.As(err, &vv), errors.Is(err, ErrClosed):
		return err
	case errors.Is(err, sql.ErrConnDone) || l.closed() && strings.Contains(err.Error(), "database is closed"):
		return ErrClosed
	}
	return fmt.Errorf("tasklog: %w", err)
}

// Stats counts what happened to the records handed to [Log.Record].
type Stats struct {
	// Recorded is how many records were stored.
	Recorded uint64 `json:"recorded"`
	// Retried is how many records needed a second attempt.
	Retried uint64 `json:"retried"`
	// Lost is how many records could not be stored (each was logged).
	Lost uint64 `json:"lost"`
	// LastError is the last write error, if any.
	LastError string `json:"last_error,omitempty"`
}

// Stats returns the record counters of this Log value (not of other
// processes sharing the file).
func (l *Log) Stats() Stats {
	l.stats.mu.Lock()
	last := l.stats.lastErr
	l.stats.mu.Unlock()
	return Stats{
		Recorded:  l.stats.recorded.Load(),
		Retried:   l.stats.retried.Load(),
		Lost:      l.stats.lost.Load(),
		LastError: last,
	}
}

func (l *Log) noteErr(err error) {
	l.stats.mu.Lock()
	l.stats.lastErr = err.Error()
	l.stats.mu.Unlock()
}

// Times are stored as INTEGER Unix nanoseconds (UTC): compact, exact and
// ordered; NULL is "not yet" (ended_at of a running task).

func ns(t time.Time) int64 { return t.UnixNano() }

func nullNS(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}
}

func fromNS(v int64) time.Time { return time.Unix(0, v).UTC() }

func fromNullNS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromNS(v.Int64)
}

// orNow returns t, or the clock's time when t is zero.
func (l *Log) orNow(t time.Time) time.Time {
	if t.IsZero() {
		return l.opts.now()
	}
	return t
}
