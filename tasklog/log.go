package tasklog

import (
	"context"
	"database/sql"
	"encoding/json"
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

	"github.com/toolmux/toolmux/tool"
)

// FileName is the name of the task log's SQLite file before the journal
// (schema versions 1 to 3): Open imports such a file into the journal and
// renames it LegacyImportedName.
const FileName = "tasklog.db"

// LegacyImportedName is what an imported tasklog.db is renamed to. It is
// kept (never deleted by toolmux); remove it once the journal is trusted.
const LegacyImportedName = "tasklog.db.imported"

// JournalDir is the journal's directory inside the data directory: its
// segments and the index.
const JournalDir = "journal"

// Exists reports whether dataDir holds a task log (a journal, or a
// tasklog.db not yet imported): what reading commands check so that they
// do not create one.
func Exists(dataDir string) bool {
	for _, p := range []string{filepath.Join(dataDir, JournalDir), filepath.Join(dataDir, FileName)} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

// Durability says what an appended record survives.
type Durability int

const (
	// DurabilityFull syncs the journal to disk (fdatasync) before an
	// append returns: a record that was acknowledged survives a crash of
	// the process, of the operating system and a power cut. The package's
	// default.
	DurabilityFull Durability = iota
	// DurabilityProcess returns once the record is written to the
	// journal's file: it survives a crash or kill of the process (the
	// operating system holds it), not a power cut.
	DurabilityProcess
)

// Option configures a Log.
type Option func(*options)

type options struct {
	log               *slog.Logger
	busyTimeout       time.Duration
	durability        Durability
	readers           int
	recordTimeout     time.Duration
	retryDelay        time.Duration
	now               func() time.Time
	segmentBytes      int64
	indexInterval     time.Duration
	retentionInterval time.Duration
	retention         Retention
	journal           Journal
	spillDir          string
	// noBackgroundRetention leaves retention to EnforceRetention (tests).
	noBackgroundRetention bool
}

// WithLogger sets where write failures of [Log.Record] and the index's
// and retention's troubles are reported. Default: discarded.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithBusyTimeout sets how long a write to the index waits for another
// process holding its lock before failing (default 10s).
func WithBusyTimeout(d time.Duration) Option { return func(o *options) { o.busyTimeout = d } }

// WithDurability sets what an appended record survives (default
// [DurabilityFull]).
func WithDurability(d Durability) Option { return func(o *options) { o.durability = d } }

// WithReaders sets how many read connections to the index may be open at
// once (default 4).
func WithReaders(n int) Option { return func(o *options) { o.readers = n } }

// WithRecordTimeout bounds each attempt of [Log.Record] to append (default
// 30s). Record ignores the cancellation of the call's context — a
// cancelled call must still be recorded — so this is its only bound.
func WithRecordTimeout(d time.Duration) Option { return func(o *options) { o.recordTimeout = d } }

// WithClock replaces time.Now for the times the log fills in itself
// (updated_at, ended_at, defaults for zero times). For tests.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithSegmentBytes sets the size at which the local journal starts a new
// segment (default: a 32nd of the retention's byte budget, between 1 MiB
// and 64 MiB). Retention drops whole segments.
func WithSegmentBytes(n int64) Option { return func(o *options) { o.segmentBytes = n } }

// WithIndexInterval sets how often the index catches up with the journal
// in the background (default 200ms): the most a query of another process,
// or the page, lags behind. Queries of this Log always see its own writes.
func WithIndexInterval(d time.Duration) Option { return func(o *options) { o.indexInterval = d } }

// WithRetention sets what the log keeps (default [DefaultRetention]).
func WithRetention(r Retention) Option { return func(o *options) { o.retention = r } }

// WithRetentionInterval sets how often retention runs (default 10s).
func WithRetentionInterval(d time.Duration) Option {
	return func(o *options) { o.retentionInterval = d }
}

// WithJournal replaces the local journal (segment files in
// DATA_DIR/journal) with another implementation; the index still lives in
// DATA_DIR/journal. Retention of the journal is then the journal's own.
func WithJournal(j Journal) Option { return func(o *options) { o.journal = j } }

// ownershipJournal is a journal that decides who owns a task (a fleet's,
// where a run is handed to another worker when its owner is presumed
// dead): Open then leaves the tasks of dead processes alone instead of
// marking them interrupted, which would be a write no owner made.
type ownershipJournal interface {
	Journal
	DecidesOwnership() bool
}

// WithSpillDir sets the directory of spilled results that retention
// counts and drops with the journal (default DATA_DIR/spill).
func WithSpillDir(dir string) Option { return func(o *options) { o.spillDir = dir } }

// Log is a task log: an append-only journal, and an index of it for
// queries. It is safe for concurrent use; see the package documentation.
type Log struct {
	owner    owner // this process, recorded on the tasks it runs
	ownerStr string
	dir      string // the data directory
	jdir     string // the journal's directory
	j        Journal
	fj       *fileJournal // the local journal; nil with WithJournal
	w        *sql.DB      // the index's one writing connection
	r        *sql.DB      // its readers
	opts     options
	log      *slog.Logger

	imu       sync.Mutex    // one catch-up at a time in this process
	indexed   atomic.Uint64 // the index holds every record before this position
	lastEvent atomic.Int64  // the highest event id known taken
	claims    claims
	recent    recentCalls

	done    chan struct{} // closed by Close
	stopped chan struct{} // closed when the background goroutine ends
	once    sync.Once
	cerr    error
	state   atomic.Bool // true once closed
	stats   struct {
		recorded, retried, lost atomic.Uint64
		mu                      sync.Mutex
		lastErr                 string
	}
}

// Open opens (creating it if needed) the task log in dir: the journal in
// dir/journal (mode 0700, files 0600: task logs hold inputs, arguments and
// results) and its index. An index that is missing, corrupt or of another
// version is rebuilt from the journal. A tasklog.db left by an older
// toolmux is imported into the journal and renamed tasklog.db.imported; one
// written by a newer toolmux is refused with a [*VersionError].
//
// Every task records the process that runs it. Open marks interrupted the
// tasks left running by a process of this machine that has died (killed,
// crashed), with a warning step saying so; tasks of live processes (which
// may share the directory) and of other machines are left alone. Tasks
// written before owners were recorded count as dead after an hour without
// a write. A journal given by [WithJournal] that decides ownership itself
// (a method DecidesOwnership() bool answering true, as a fleet's does) is
// left to do so: Open then marks nothing interrupted.
func Open(ctx context.Context, dir string, opts ...Option) (*Log, error) {
	o := options{
		log:               slog.New(slog.DiscardHandler),
		busyTimeout:       10 * time.Second,
		readers:           4,
		recordTimeout:     30 * time.Second,
		retryDelay:        50 * time.Millisecond,
		now:               time.Now,
		indexInterval:     200 * time.Millisecond,
		retentionInterval: 10 * time.Second,
		retention:         DefaultRetention(),
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	o.readers = max(o.readers, 1)
	if o.indexInterval <= 0 {
		o.indexInterval = 200 * time.Millisecond
	}
	if o.retentionInterval <= 0 {
		o.retentionInterval = 10 * time.Second
	}
	if dir == "" {
		return nil, &ValidationError{Field: "dir", Reason: "a data directory is needed"}
	}
	if strings.ContainsAny(dir, "?#") {
		// The SQLite driver reads everything after '?' as parameters.
		return nil, &ValidationError{Field: "dir", Value: dir, Reason: "must not contain '?' or '#'"}
	}
	if o.spillDir == "" {
		o.spillDir = filepath.Join(dir, "spill")
	}
	if o.segmentBytes <= 0 {
		o.segmentBytes = o.retention.segmentBytes()
	}
	jdir := filepath.Join(dir, JournalDir)
	if err := os.MkdirAll(jdir, 0o700); err != nil {
		return nil, fmt.Errorf("tasklog: %w", err)
	}
	self := self()
	l := &Log{owner: self, ownerStr: self.String(), dir: dir, jdir: jdir, opts: o, log: o.log,
		done: make(chan struct{}), stopped: make(chan struct{})}
	l.recent.init()
	if o.journal != nil {
		l.j = o.journal
	} else {
		fj, err := openFileJournal(jdir, o.durability == DurabilityFull, o.segmentBytes)
		if err != nil {
			return nil, err
		}
		l.j, l.fj = fj, fj
	}
	if err := l.openIndex(ctx); err != nil {
		l.j.Close()
		return nil, err
	}
	if err := l.recover(ctx); err != nil {
		l.closeFiles()
		return nil, err
	}
	go l.background()
	return l, nil
}

// recover does, under the open lock (one process at a time), what a
// process opening the log owes the others: import a legacy tasklog.db,
// index the journal, cut a torn record off its end, and mark the tasks of
// dead processes interrupted.
func (l *Log) recover(ctx context.Context) error {
	lock, err := os.OpenFile(filepath.Join(l.jdir, "open.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("tasklog: %w", err)
	}
	defer lock.Close()
	if err := flock(lock, 2 /* LOCK_EX */); err != nil {
		return err
	}
	if err := l.catchUp(ctx); err != nil {
		return l.dbErr(err)
	}
	if err := l.importLegacy(ctx); err != nil {
		return err
	}
	if err := l.catchUp(ctx); err != nil {
		return l.dbErr(err)
	}
	if l.fj != nil {
		if err := l.fj.repairTail(ctx, Pos(l.indexed.Load())); err != nil {
			l.log.Warn("tasklog: could not check the journal's end", "error", err)
		}
	}
	if oj, ok := l.j.(ownershipJournal); ok && oj.DecidesOwnership() {
		// A shared journal (a fleet's) decides who owns a task itself:
		// a process of this host that died is not the fleet's word.
		return nil
	}
	if ids, err := l.recoverOrphans(ctx); err != nil {
		l.log.Warn("tasklog: could not mark the tasks of dead processes interrupted", "error", err)
	} else if len(ids) > 0 {
		l.log.Info("tasklog: tasks of processes that died marked interrupted", "tasks", ids)
	}
	if ids, err := l.recoverMCPTasks(ctx); err != nil {
		l.log.Warn("tasklog: could not end the MCP tasks of dead processes", "error", err)
	} else if len(ids) > 0 {
		l.log.Info("tasklog: MCP tasks of processes that died ended failed", "tasks", ids)
	}
	return nil
}

func cloneValues(v url.Values) url.Values {
	c := url.Values{}
	for k, vs := range v {
		c[k] = append([]string(nil), vs...)
	}
	return c
}

func (l *Log) indexPath() string { return filepath.Join(l.jdir, IndexName) }

// Path returns the journal's directory (segments and index).
func (l *Log) Path() string { return l.jdir }

// Close stops the background goroutine, indexes what is left (so the
// next reader need not), and closes the journal and the index. Appends
// under way finish first; every later call returns [ErrClosed], and a
// later Record is counted as lost. Close is idempotent.
func (l *Log) Close() error {
	l.once.Do(func() {
		close(l.done)
		<-l.stopped
		l.state.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := l.catchUp(ctx); err != nil {
			// The next reader catches up instead.
			l.log.Warn("tasklog: indexing the journal at close failed", "error", err)
		}
		cancel()
		l.cerr = l.closeFiles()
	})
	return l.cerr
}

func (l *Log) closeFiles() error {
	var errs []error
	if l.j != nil {
		errs = append(errs, l.j.Close())
	}
	if l.w != nil {
		errs = append(errs, l.w.Close())
	}
	if l.r != nil {
		errs = append(errs, l.r.Close())
	}
	return errors.Join(errs...)
}

func (l *Log) closed() bool { return l.state.Load() }

// appendRecs appends records, in order and as one unit.
func (l *Log) appendRecs(ctx context.Context, recs ...*jrec) (Pos, error) {
	payloads := make([][]byte, len(recs))
	for i, r := range recs {
		b, err := l.encode(r)
		if err != nil {
			return 0, err
		}
		payloads[i] = b
	}
	return l.appendPayloads(ctx, payloads...)
}

// encode fills in a record's version, id and time and marshals it.
func (l *Log) encode(r *jrec) ([]byte, error) {
	r.V = FormatVersion
	if r.ID == "" {
		r.ID = tool.NewID()
	}
	if r.At == 0 {
		r.At = l.opts.now().UnixNano()
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("tasklog: encoding a %s record: %w", r.Type, err)
	}
	return b, nil
}

func (l *Log) appendPayloads(ctx context.Context, payloads ...[]byte) (Pos, error) {
	if l.closed() {
		return 0, ErrClosed
	}
	pos, err := l.j.Append(ctx, payloads...)
	if errors.Is(err, errJournalClosed) {
		return 0, ErrClosed
	}
	return pos, err
}

// read runs fn in one read transaction of the index, after the index has
// caught up with the journal, so what it reads is one snapshot holding
// every write that returned before.
func (l *Log) read(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := l.sync(ctx); err != nil {
		return err
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
		ge *GoneError
	)
	switch {
	case errors.As(err, &nf), errors.As(err, &ae), errors.As(err, &ve), errors.As(err, &de), errors.As(err, &vv), errors.As(err, &ge),
		errors.Is(err, ErrClosed):
		return err
	case errors.Is(err, sql.ErrConnDone) || errors.Is(err, errJournalClosed) || l.closed() && strings.Contains(err.Error(), "database is closed"):
		return ErrClosed
	case strings.HasPrefix(err.Error(), "tasklog: "):
		return err
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
// processes sharing the journal).
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

// Version returns the schema version of the index.
func (l *Log) Version(ctx context.Context) (int, error) {
	var v int
	err := l.read(ctx, func(tx *sql.Tx) error {
		v = int(getMeta(ctx, tx, metaVersion))
		return nil
	})
	return v, err
}

// Times are stored as Unix nanoseconds (UTC).

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

// claims remembers the tasks this process has written for, so that only
// its first record of a task carries the owner (the task's owner if that
// record creates it). Bounded: a forgotten task just gets the owner again.
type claims struct {
	mu   sync.Mutex
	m    map[string]struct{}
	ring []string
	next int
}

const maxClaims = 4096

// owner returns the owner to put on a record of task: this process's the
// first time, "" after.
func (l *Log) claim(task string) string {
	if task == "" {
		return ""
	}
	c := &l.claims
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[task]; ok {
		return ""
	}
	if c.m == nil {
		c.m = make(map[string]struct{}, maxClaims)
		c.ring = make([]string, maxClaims)
	}
	if old := c.ring[c.next]; old != "" {
		delete(c.m, old)
	}
	c.ring[c.next] = task
	c.next = (c.next + 1) % maxClaims
	c.m[task] = struct{}{}
	return l.ownerStr
}

// unclaim forgets a claim whose record was not appended.
func (l *Log) unclaim(task string) {
	c := &l.claims
	c.mu.Lock()
	delete(c.m, task)
	c.mu.Unlock()
}

// JournalStats is the size of the local journal and how far this
// process's index trails it.
type JournalStats struct {
	// Bytes is the size of the journal's segment files (their length,
	// not the blocks they take; RetentionStatus counts those).
	Bytes int64 `json:"bytes"`
	// Segments is how many segment files there are.
	Segments int `json:"segments"`
	// IndexLagBytes is how many bytes of the journal this process has not
	// yet indexed: 0 once a catch-up (every 200ms, and before every
	// query) has run since the last append.
	IndexLagBytes int64 `json:"index_lag_bytes"`
}

// JournalStats reports the local journal's size and the index's lag
// behind it; ok is false when the journal is not local ([WithJournal]),
// whose size and positions are the journal's own business. It reads the
// journal's directory, nothing more: cheap enough for every scrape.
func (l *Log) JournalStats() (st JournalStats, ok bool, err error) {
	if l.fj == nil {
		return st, false, nil
	}
	ents, err := os.ReadDir(l.jdir)
	if err != nil {
		return st, true, fmt.Errorf("tasklog: %w", err)
	}
	indexed := Pos(l.indexed.Load())
	for _, e := range ents {
		seq, isSeg := parseSegName(e.Name())
		if !isSeg {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // dropped by retention meanwhile
		}
		st.Segments++
		st.Bytes += info.Size()
		switch {
		case seq > indexed.seg():
			st.IndexLagBytes += info.Size()
		case seq == indexed.seg():
			st.IndexLagBytes += max(info.Size()-int64(indexed.off()), 0)
		}
	}
	return st, true, nil
}
