package tasklog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolmux/toolmux/tool"
)

// Retention is what the log keeps: it drops the oldest journal segments
// (and with them the tasks that ended in them) and spilled results
// (DATA_DIR/spill), oldest first, until what is left is younger than
// MaxAge and, journal, index and spill files together, no larger than
// MaxBytes. It never drops a running task: its start, steps and messages
// are carried forward into the journal's newest segment; only its oldest
// call records go with their segment.
type Retention struct {
	// MaxAge drops what is older; 0 keeps everything, however old.
	MaxAge time.Duration `json:"max_age"`
	// MaxBytes bounds the journal, its index and the spill files
	// together, as `du` counts them; 0 is no bound.
	MaxBytes int64 `json:"max_bytes"`
}

// The defaults of [DefaultRetention].
const (
	DefaultMaxAge   = 30 * 24 * time.Hour
	DefaultMaxBytes = 1 << 30
)

// DefaultRetention keeps 30 days and 1 GiB: a gateway that runs for
// months never fills its disk.
func DefaultRetention() Retention { return Retention{MaxAge: DefaultMaxAge, MaxBytes: DefaultMaxBytes} }

// segmentBytes is the segment size that suits the budget: small enough
// that dropping one is a small step (a 32nd), between 1 MiB and 64 MiB.
func (r Retention) segmentBytes() int64 {
	if r.MaxBytes <= 0 {
		return 32 << 20
	}
	return min(max(r.MaxBytes/32, 1<<20), 64<<20)
}

// RetentionStatus is what retention has dropped since the journal began,
// and what the log holds now.
type RetentionStatus struct {
	Retention
	// Bytes is what the journal, its index and the spill files take now.
	Bytes int64 `json:"bytes"`
	// Segments is how many journal segments there are.
	Segments int `json:"segments"`
	// Dropped counts what retention dropped, ever.
	DroppedSegments   int64 `json:"dropped_segments"`
	DroppedTasks      int64 `json:"dropped_tasks"`
	DroppedCalls      int64 `json:"dropped_calls"`
	DroppedSpillFiles int64 `json:"dropped_spill_files"`
	DroppedBytes      int64 `json:"dropped_bytes"`
	// LastDrop is when retention last dropped something (zero: never).
	LastDrop time.Time `json:"last_drop,omitzero"`
}

// RetentionStatus reports what retention has dropped and what is kept.
func (l *Log) RetentionStatus(ctx context.Context) (RetentionStatus, error) {
	st := RetentionStatus{Retention: l.opts.retention}
	err := l.read(ctx, func(tx *sql.Tx) error {
		st.DroppedSegments = getMeta(ctx, tx, metaDroppedSegs)
		st.DroppedTasks = getMeta(ctx, tx, metaDroppedTask)
		st.DroppedCalls = getMeta(ctx, tx, metaDroppedCall)
		st.DroppedSpillFiles = getMeta(ctx, tx, metaDroppedSpil)
		st.DroppedBytes = getMeta(ctx, tx, metaDroppedByte)
		if v := getMeta(ctx, tx, metaDroppedLast); v != 0 {
			st.LastDrop = fromNS(v)
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	u, err := l.usage()
	if err != nil {
		return st, err
	}
	st.Bytes, st.Segments = u.total(), len(u.segs)
	return st, nil
}

// usage is what the log's files take.
type usage struct {
	segs  []segUsage // oldest first; the last is the current one
	other int64      // the index, locks
	spill []spillFile
}

type segUsage struct {
	seq   uint32
	bytes int64
	mod   time.Time
}

type spillFile struct {
	path  string
	bytes int64
	mod   time.Time
}

func (u usage) total() int64 {
	n := u.other
	for _, s := range u.segs {
		n += s.bytes
	}
	for _, f := range u.spill {
		n += f.bytes
	}
	return n
}

// diskBytes is what a file takes on disk, as du counts it.
func diskBytes(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*unix.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}

func (l *Log) usage() (usage, error) {
	var u usage
	ents, err := os.ReadDir(l.jdir)
	if err != nil {
		return u, fmt.Errorf("tasklog: %w", err)
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if seq, ok := parseSegName(e.Name()); ok {
			u.segs = append(u.segs, segUsage{seq: seq, bytes: diskBytes(info), mod: info.ModTime()})
			continue
		}
		u.other += diskBytes(info)
	}
	slices.SortFunc(u.segs, func(a, b segUsage) int { return int(int64(a.seq) - int64(b.seq)) })
	_ = filepath.WalkDir(l.opts.spillDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			u.spill = append(u.spill, spillFile{path: path, bytes: diskBytes(info), mod: info.ModTime()})
		}
		return nil
	})
	slices.SortFunc(u.spill, func(a, b spillFile) int { return a.mod.Compare(b.mod) })
	return u, nil
}

// spillGrace keeps spill files this recent: they may still be written.
const spillGrace = time.Minute

// RetentionReport is what one retention pass dropped.
type RetentionReport struct {
	Segments   []uint32
	Tasks      []string
	Calls      int64
	SpillFiles int64
	Bytes      int64
}

// EnforceRetention runs retention now (it also runs in the background,
// every 10s by default) and reports what it dropped. Only one process
// sharing the journal runs it at a time; the others skip their turn.
func (l *Log) EnforceRetention(ctx context.Context) (RetentionReport, error) {
	return l.enforceRetention(ctx)
}

func (l *Log) enforceRetention(ctx context.Context) (RetentionReport, error) {
	var rep RetentionReport
	ret := l.opts.retention
	if l.fj == nil || (ret.MaxAge <= 0 && ret.MaxBytes <= 0) {
		return rep, nil
	}
	if l.closed() {
		return rep, ErrClosed
	}
	lock, err := os.OpenFile(filepath.Join(l.jdir, "retention.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return rep, fmt.Errorf("tasklog: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return rep, nil // another process is at it
	}
	if err := l.sync(ctx); err != nil {
		return rep, err
	}
	u, err := l.usage()
	if err != nil || len(u.segs) < 2 {
		return rep, err
	}
	now := l.opts.now()
	total := u.total()
	// Segments that may go: every one but the newest, and only those
	// indexed (all are, after sync, but for a record half-written).
	indexed := Pos(l.indexed.Load()).seg()
	segs := u.segs[:len(u.segs)-1]
	// The index shrinks with the journal (it is vacuumed after a drop):
	// count its share with each segment, or a large index would have
	// every segment dropped.
	var journalBytes int64
	for _, s := range u.segs {
		journalBytes += s.bytes
	}
	share := func(b int64) int64 {
		if journalBytes == 0 {
			return b
		}
		return b + u.other*b/journalBytes
	}
	var dropSegs []segUsage
	var dropSpill []spillFile
	reason := "age"
	for len(segs) > 0 || len(u.spill) > 0 {
		var segOld, spillOld bool
		if len(segs) > 0 && segs[0].seq < indexed {
			segOld = ret.MaxAge > 0 && now.Sub(segs[0].mod) > ret.MaxAge
		}
		if len(u.spill) > 0 && now.Sub(u.spill[0].mod) > spillGrace {
			spillOld = ret.MaxAge > 0 && now.Sub(u.spill[0].mod) > ret.MaxAge
		}
		over := ret.MaxBytes > 0 && total > ret.MaxBytes
		if !segOld && !spillOld && !over {
			break
		}
		if over && !segOld && !spillOld {
			reason = "bytes"
		}
		// The older of the two candidates goes first.
		canSeg := len(segs) > 0 && segs[0].seq < indexed && (segOld || over)
		canSpill := len(u.spill) > 0 && now.Sub(u.spill[0].mod) > spillGrace && (spillOld || over)
		switch {
		case canSeg && (!canSpill || !u.spill[0].mod.Before(segs[0].mod)):
			dropSegs = append(dropSegs, segs[0])
			total -= share(segs[0].bytes)
			segs = segs[1:]
		case canSpill:
			dropSpill = append(dropSpill, u.spill[0])
			total -= u.spill[0].bytes
			u.spill = u.spill[1:]
		default:
			segs, u.spill = nil, nil // nothing more may go
		}
	}
	if len(dropSegs) == 0 && len(dropSpill) == 0 {
		return rep, nil
	}
	for _, f := range dropSpill {
		if err := os.Remove(f.path); err == nil {
			rep.SpillFiles++
			rep.Bytes += f.bytes
			_ = os.Remove(filepath.Dir(f.path)) // when empty
		}
	}
	if len(dropSegs) > 0 {
		if err := l.dropSegments(ctx, dropSegs, &rep, reason); err != nil {
			return rep, err
		}
	}
	d := &jDrop{Tasks: rep.Tasks, Calls: rep.Calls, SpillFiles: rep.SpillFiles, Bytes: rep.Bytes, Reason: reason}
	if len(dropSegs) == 0 {
		if d.Total, err = l.totals(ctx, d); err != nil {
			return rep, err
		}
		if _, err := l.appendRecs(ctx, &jrec{Type: recDrop, Drop: d}); err != nil {
			return rep, err
		}
	}
	if len(dropSegs) > 0 {
		l.compactIndex(ctx)
	}
	l.log.Info("tasklog: retention dropped old records", "reason", reason, "segments", len(rep.Segments),
		"tasks", len(rep.Tasks), "calls", rep.Calls, "spill_files", rep.SpillFiles, "bytes", rep.Bytes)
	return rep, l.sync(ctx)
}

// totals returns what retention dropped so far and this pass together.
func (l *Log) totals(ctx context.Context, d *jDrop) (*jDropTotal, error) {
	t := &jDropTotal{}
	err := l.read(ctx, func(tx *sql.Tx) error {
		t.Segments = getMeta(ctx, tx, metaDroppedSegs) + int64(len(d.Segments))
		t.Tasks = getMeta(ctx, tx, metaDroppedTask) + int64(len(d.Tasks))
		t.Calls = getMeta(ctx, tx, metaDroppedCall) + d.Calls
		t.SpillFiles = getMeta(ctx, tx, metaDroppedSpil) + d.SpillFiles
		t.Bytes = getMeta(ctx, tx, metaDroppedByte) + d.Bytes
		return nil
	})
	return t, err
}

// dropSegments drops the oldest segments: the tasks that began in them
// and have ended go whole; the running ones are carried forward (start,
// steps, messages) and lose only their calls in those segments.
func (l *Log) dropSegments(ctx context.Context, segs []segUsage, rep *RetentionReport, reason string) error {
	before := segs[len(segs)-1].seq + 1
	bound := int64(mkPos(before, 0))
	var carries []*jrec
	err := l.read(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT id, status, created_at, updated_at, input, metadata, owner, caller_key, caller_name
			FROM tasks WHERE first_pos < ? ORDER BY created_at`, bound)
		if err != nil {
			return err
		}
		type task struct {
			id, status, input, meta, owner string
			created, updated               int64
			caller                         callerCols
		}
		var tasks []task
		for rows.Next() {
			var t task
			if err := rows.Scan(&t.id, &t.status, &t.created, &t.updated, &t.input, &t.meta, &t.owner, &t.caller.key, &t.caller.name); err != nil {
				rows.Close()
				return err
			}
			tasks = append(tasks, t)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, t := range tasks {
			if Status(t.status) != StatusRunning {
				rep.Tasks = append(rep.Tasks, t.id)
				continue
			}
			c := &jCarry{Status: StatusRunning, Created: t.created, Updated: t.updated, Input: t.input, Caller: t.caller.ref()}
			if t.meta != "" && t.meta != "{}" {
				c.Metadata = json.RawMessage(t.meta)
			}
			if c.Steps, err = carriedSteps(ctx, tx, t.id, bound); err != nil {
				return err
			}
			if c.Messages, err = carriedMessages(ctx, tx, t.id, bound); err != nil {
				return err
			}
			carries = append(carries, &jrec{Type: recCarry, Task: t.id, Owner: t.owner, Carry: c})
		}
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM calls c JOIN tasks t ON t.id = c.task_id WHERE c.pos < ? AND t.status = 'running'`, bound).Scan(&n); err != nil {
			return err
		}
		rep.Calls = n
		return nil
	})
	if err != nil {
		return err
	}
	for _, s := range segs {
		rep.Segments = append(rep.Segments, s.seq)
		rep.Bytes += s.bytes
	}
	d := &jDrop{Segments: rep.Segments, Before: before, Tasks: rep.Tasks, Calls: rep.Calls, SpillFiles: rep.SpillFiles,
		Bytes: rep.Bytes, Reason: reason}
	if d.Total, err = l.totals(ctx, d); err != nil {
		return err
	}
	if _, err := l.appendRecs(ctx, append(carries, &jrec{Type: recDrop, Drop: d})...); err != nil {
		return err
	}
	// The index forgets them before the files go, so no query looks for
	// a record that is gone.
	if err := l.sync(ctx); err != nil {
		return err
	}
	for _, s := range segs {
		if err := os.Remove(filepath.Join(l.jdir, segName(s.seq))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("tasklog: dropping a journal segment: %w", err)
		}
		l.fj.forget(s.seq)
	}
	for _, id := range rep.Tasks {
		_ = os.RemoveAll(filepath.Join(l.opts.spillDir, tool.Sanitize(id)))
	}
	return nil
}

func carriedSteps(ctx context.Context, tx *sql.Tx, task string, bound int64) ([]jCarriedStep, error) {
	rows, err := tx.QueryContext(ctx, `SELECT seq, name, message, level, time, metadata FROM steps WHERE task_id = ? AND seq < ? ORDER BY seq`, task, bound)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []jCarriedStep
	for rows.Next() {
		var (
			s     jCarriedStep
			level string
			meta  sql.NullString
		)
		if err := rows.Scan(&s.Seq, &s.Name, &s.Message, &level, &s.Time, &meta); err != nil {
			return nil, err
		}
		s.Level = Level(level)
		if meta.Valid {
			s.Metadata = json.RawMessage(meta.String)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func carriedMessages(ctx context.Context, tx *sql.Tx, task string, bound int64) ([]jCarriedMsg, error) {
	rows, err := tx.QueryContext(ctx, `SELECT ord, i, session, role, content, name, tool_call_id, tool_calls, time FROM messages WHERE task_id = ? AND ord < ? ORDER BY ord, i`, task, bound)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []jCarriedMsg
	for rows.Next() {
		var (
			m       jCarriedMsg
			content string
			calls   sql.NullString
		)
		if err := rows.Scan(&m.Ord, &m.I, &m.Session, &m.Role, &content, &m.Name, &m.ToolCallID, &calls, &m.Time); err != nil {
			return nil, err
		}
		m.Content = json.RawMessage(content)
		if calls.Valid {
			m.ToolCalls = json.RawMessage(calls.String)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// compactIndex gives the index's freed pages back to the file system and
// empties its write-ahead log, after retention deleted rows.
func (l *Log) compactIndex(ctx context.Context) {
	l.imu.Lock()
	defer l.imu.Unlock()
	for _, q := range []string{`PRAGMA incremental_vacuum`, `PRAGMA wal_checkpoint(TRUNCATE)`} {
		if _, err := l.w.ExecContext(ctx, q); err != nil {
			l.log.Warn("tasklog: compacting the index", "statement", q, "error", err)
		}
	}
}
