package tasklog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Journal is the durable, append-only sequence of records a Log is made
// of, as the Log needs it. The local implementation is a directory of
// segment files ([openFileJournal]); a JetStream stream can be another
// (its stream sequence is a position, each record one message, the
// record's id its Nats-Msg-Id). It is declared here, by its one consumer.
//
// Positions are opaque, increasing in the order records were appended,
// and never reused; 0 is before the first record.
type Journal interface {
	// Append appends the payloads, in order, and returns the position of
	// the first once they are as durable as the journal promises (written
	// to the operating system, or synced to disk). Payloads appended by one
	// call are never separated by another's.
	Append(ctx context.Context, payloads ...[]byte) (Pos, error)
	// Scan calls fn with every record from position from on, in order,
	// until the end as of now or until fn returns false, and returns the
	// position after the last record it passed (from when none). A payload
	// is only valid during its call.
	Scan(ctx context.Context, from Pos, fn func(pos Pos, payload []byte) bool) (Pos, error)
	// ReadAt returns the record at pos (a position Append or Scan gave).
	// A record dropped by retention is a *GoneError.
	ReadAt(ctx context.Context, pos Pos) ([]byte, error)
	// End returns a position at or after the end of every record appended
	// so far by anyone: cheap, for "is there anything new?".
	End(ctx context.Context) (Pos, error)
	// Close releases the journal's files.
	Close() error
}

// Pos is a position in a journal. For the local journal it is the
// segment's number in the high 32 bits and the offset of the record's
// frame in the segment in the low 32.
type Pos uint64

func mkPos(seg uint32, off uint32) Pos { return Pos(uint64(seg)<<32 | uint64(off)) }

func (p Pos) seg() uint32 { return uint32(p >> 32) }
func (p Pos) off() uint32 { return uint32(p) }

// String is segment:offset.
func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.seg(), p.off()) }

// GoneError says that a record is no longer in the journal: its segment
// was dropped by retention.
type GoneError struct{ Pos Pos }

// Error implements the error interface.
func (e *GoneError) Error() string {
	return fmt.Sprintf("tasklog: journal record %s was dropped by retention", e.Pos)
}

// Frames. Every record is stored as
//
//	0xFF 'J' | length (uint32 LE) | CRC-32C of length and payload (uint32 LE) | payload
//
// 0xFF never occurs in UTF-8 (payloads are JSON), so a reader that meets a
// torn or corrupt frame finds the next one by looking for it; the CRC
// tells a real frame from bytes that merely look like one.
const (
	frameMagic0 = 0xFF
	frameMagic1 = 'J'
	frameHeader = 10
	// maxFrame bounds one payload; larger is refused (records are bounded
	// by limits.max_record_bytes well below this).
	maxFrame = 256 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendFrame appends the frame of payload to dst.
func appendFrame(dst, payload []byte) []byte {
	var h [frameHeader]byte
	h[0], h[1] = frameMagic0, frameMagic1
	binary.LittleEndian.PutUint32(h[2:6], uint32(len(payload)))
	crc := crc32.Update(0, castagnoli, h[2:6])
	crc = crc32.Update(crc, castagnoli, payload)
	binary.LittleEndian.PutUint32(h[6:10], crc)
	dst = append(dst, h[:]...)
	return append(dst, payload...)
}

// frameAt reads the frame at the start of b: its payload and its total
// length, or ok false with incomplete true when b ends inside a frame that
// looks right so far (more bytes may complete it).
func frameAt(b []byte) (payload []byte, n int, ok, incomplete bool) {
	if len(b) < 2 {
		return nil, 0, false, len(b) == 0 || b[0] == frameMagic0
	}
	if b[0] != frameMagic0 || b[1] != frameMagic1 {
		return nil, 0, false, false
	}
	if len(b) < frameHeader {
		return nil, 0, false, true
	}
	size := binary.LittleEndian.Uint32(b[2:6])
	if size > maxFrame {
		return nil, 0, false, false
	}
	end := frameHeader + int(size)
	if len(b) < end {
		return nil, 0, false, true
	}
	crc := crc32.Update(0, castagnoli, b[2:6])
	crc = crc32.Update(crc, castagnoli, b[frameHeader:end])
	if crc != binary.LittleEndian.Uint32(b[6:10]) {
		return nil, 0, false, false
	}
	return b[frameHeader:end], end, true, false
}

// resync returns the offset in b, after its first byte, of the next
// complete valid frame, or of the first place a frame could begin that b
// ends too early to judge; -1 when there is neither.
func resync(b []byte) (at int, complete bool) {
	for i := 1; i < len(b); i++ {
		if b[i] != frameMagic0 {
			continue
		}
		_, _, ok, incomplete := frameAt(b[i:])
		if ok {
			return i, true
		}
		if incomplete {
			return i, false
		}
	}
	return -1, false
}

// The local journal's files, in DATA_DIR/journal:
//
//	lock                  flock'd by an appender while it writes; holds the current segment's number
//	0000000000000001.seg  segments, numbered from 1, appended to until full
const (
	segSuffix = ".seg"
	lockName  = "lock"
)

func segName(seq uint32) string { return fmt.Sprintf("%016x%s", seq, segSuffix) }

func parseSegName(name string) (uint32, bool) {
	hex, ok := strings.CutSuffix(name, segSuffix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	v, err := strconv.ParseUint(hex, 16, 32)
	if err != nil || v == 0 {
		return 0, false
	}
	return uint32(v), true
}

// fileJournal is the local journal: a directory of segment files shared by
// every process that opens it. Appends of one process are committed in
// groups (one write, and one fsync with full durability, for all the
// appends waiting at the time); appends of different processes take turns
// through an flock on the lock file, held for one write. Segments are
// appended to with O_APPEND until they reach segBytes; the appender that
// finds the current one full starts the next.
type fileJournal struct {
	dir      string
	sync     bool // fdatasync every group commit (DurabilityFull)
	segBytes int64
	lock     *os.File
	// faults, when set, replaces the write of a group commit (tests).
	faults func(seg uint32, b []byte) (int, error)

	// group commit
	qmu     sync.Mutex
	queue   []*appendReq
	writing bool
	spare   []*appendReq

	// the writer's state; only the leader of a group commit touches it
	wseq  uint32
	wfile *os.File
	buf   []byte

	// readers' open segments
	rmu   sync.Mutex
	rfile map[uint32]*os.File

	closeOnce sync.Once
	closed    bool
}

type appendReq struct {
	payloads [][]byte
	first    Pos
	err      error
	done     chan struct{}
	lead     bool // woken to lead the next group, not done
}

var errJournalClosed = errors.New("tasklog: the journal is closed")

// openFileJournal opens (creating) the journal in dir.
func openFileJournal(dir string, fullSync bool, segBytes int64) (*fileJournal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tasklog: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("tasklog: %w", err)
	}
	if segBytes <= 0 {
		segBytes = 32 << 20
	}
	// Offsets are 32 bits.
	segBytes = min(segBytes, 1<<31)
	return &fileJournal{dir: dir, sync: fullSync, segBytes: segBytes, lock: lock, rfile: map[uint32]*os.File{}}, nil
}

// Append implements Journal. The calling goroutine writes its own payloads
// when no write is under way (no hand-off); otherwise it queues them and
// the goroutine writing takes them into its next group.
func (j *fileJournal) Append(ctx context.Context, payloads ...[]byte) (Pos, error) {
	for _, p := range payloads {
		if len(p) > maxFrame {
			return 0, &ValidationError{Field: "record", Value: fmt.Sprintf("%d bytes", len(p)), Reason: fmt.Sprintf("larger than the journal's %d-byte frame", maxFrame)}
		}
	}
	r := &appendReq{payloads: payloads, done: make(chan struct{}, 1)}
	j.qmu.Lock()
	if j.closed {
		j.qmu.Unlock()
		return 0, errJournalClosed
	}
	j.queue = append(j.queue, r)
	if j.writing {
		j.qmu.Unlock()
		<-r.done
		if !r.lead {
			return r.first, r.err
		}
		j.qmu.Lock()
	}
	// This goroutine leads: it writes what is queued (its own payloads
	// first among them, or after those queued before it) as one group.
	j.writing = true
	batch := j.queue
	j.queue = j.spare[:0]
	j.qmu.Unlock()

	j.commit(batch)
	for i, q := range batch {
		if q != r {
			q.done <- struct{}{}
		}
		batch[i] = nil
	}

	j.qmu.Lock()
	j.spare = batch[:0]
	if len(j.queue) > 0 {
		// Hand the lead to the first waiter: it writes the next group.
		next := j.queue[0]
		next.lead = true
		next.done <- struct{}{}
	} else {
		j.writing = false
	}
	j.qmu.Unlock()
	return r.first, r.err
}

// commit writes one group: flock, find the current segment (starting a
// new one when it is full), one write, fdatasync with full durability.
func (j *fileJournal) commit(batch []*appendReq) {
	fail := func(err error) {
		for _, q := range batch {
			q.err = err
		}
	}
	j.buf = j.buf[:0]
	for _, q := range batch {
		for _, p := range q.payloads {
			j.buf = appendFrame(j.buf, p)
		}
	}
	if err := flock(j.lock, unix.LOCK_EX); err != nil {
		fail(err)
		return
	}
	defer flock(j.lock, unix.LOCK_UN) //nolint:errcheck // closing the file would release it too
	cur, err := j.currentSeg()
	if err != nil {
		fail(err)
		return
	}
	size, err := j.openWriter(cur)
	if err != nil {
		fail(err)
		return
	}
	if size > 0 && size+int64(len(j.buf)) > j.segBytes {
		if size, err = j.rotate(cur + 1); err != nil {
			fail(err)
			return
		}
	}
	write := j.wfile.Write
	if j.faults != nil {
		seq := j.wseq
		write = func(b []byte) (int, error) {
			n, err := j.faults(seq, b)
			if n > 0 {
				if _, werr := j.wfile.Write(b[:n]); werr != nil && err == nil {
					err = werr
				}
			}
			return n, err
		}
	}
	n, err := write(j.buf)
	if err == nil && n < len(j.buf) {
		err = io.ErrShortWrite
	}
	if err == nil && j.sync {
		err = unix.Fdatasync(int(j.wfile.Fd()))
	}
	if err != nil {
		// Nobody else writes while the lock is held: take back what was
		// written, so the segment ends with a whole frame. If even that
		// fails, readers skip the torn frame by its CRC.
		_ = j.wfile.Truncate(size)
		fail(fmt.Errorf("tasklog: writing the journal: %w", err))
		return
	}
	off := size
	for _, q := range batch {
		q.first = mkPos(j.wseq, uint32(off))
		for _, p := range q.payloads {
			off += int64(frameHeader + len(p))
		}
	}
}

// currentSeg reads the current segment's number from the lock file (the
// lock is held); 0 when the journal is new.
func (j *fileJournal) currentSeg() (uint32, error) {
	var b [4]byte
	n, err := j.lock.ReadAt(b[:], 0)
	if n < 4 {
		if err == nil || errors.Is(err, io.EOF) {
			return 0, nil
		}
		return 0, fmt.Errorf("tasklog: reading the journal's lock file: %w", err)
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

// openWriter makes wfile the current segment (creating the first one of a
// new journal) and returns its size, where the next write lands.
func (j *fileJournal) openWriter(cur uint32) (int64, error) {
	if cur == 0 {
		return j.rotate(1)
	}
	if j.wfile == nil || j.wseq != cur {
		f, err := os.OpenFile(filepath.Join(j.dir, segName(cur)), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return 0, fmt.Errorf("tasklog: opening the journal: %w", err)
		}
		if j.wfile != nil {
			j.wfile.Close()
		}
		j.wfile, j.wseq = f, cur
	}
	st, err := j.wfile.Stat()
	if err != nil {
		return 0, fmt.Errorf("tasklog: %w", err)
	}
	return st.Size(), nil
}

// rotate starts segment seq and makes it current (the lock is held).
func (j *fileJournal) rotate(seq uint32) (int64, error) {
	f, err := os.OpenFile(filepath.Join(j.dir, segName(seq)), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return 0, fmt.Errorf("tasklog: starting a journal segment: %w", err)
	}
	if j.sync {
		if err := syncDir(j.dir); err != nil {
			f.Close()
			return 0, err
		}
	}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], seq)
	if _, err := j.lock.WriteAt(b[:], 0); err != nil {
		f.Close()
		return 0, fmt.Errorf("tasklog: %w", err)
	}
	if j.sync {
		if err := j.lock.Sync(); err != nil {
			f.Close()
			return 0, fmt.Errorf("tasklog: %w", err)
		}
	}
	if j.wfile != nil {
		j.wfile.Close()
	}
	j.wfile, j.wseq = f, seq
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("tasklog: %w", err)
	}
	return st.Size(), nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("tasklog: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("tasklog: syncing %s: %w", dir, err)
	}
	return nil
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			if err != nil {
				return fmt.Errorf("tasklog: locking the journal: %w", err)
			}
			return nil
		}
	}
}

// segments lists the journal's segment numbers, oldest first.
func (j *fileJournal) segments() ([]uint32, error) {
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, fmt.Errorf("tasklog: %w", err)
	}
	var out []uint32
	for _, e := range ents {
		if seq, ok := parseSegName(e.Name()); ok {
			out = append(out, seq)
		}
	}
	slices.Sort(out)
	return out, nil
}

// reader returns an open file of segment seq for reading, or nil when the
// segment does not exist (dropped, or not yet started).
func (j *fileJournal) reader(seq uint32) (*os.File, error) {
	j.rmu.Lock()
	defer j.rmu.Unlock()
	if j.closed {
		return nil, errJournalClosed
	}
	if f, ok := j.rfile[seq]; ok {
		return f, nil
	}
	f, err := os.Open(filepath.Join(j.dir, segName(seq)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tasklog: %w", err)
	}
	// A few segments stay open: a scan moves forward, reads of records
	// mostly hit the newest.
	if len(j.rfile) >= 8 {
		for s, of := range j.rfile {
			of.Close()
			delete(j.rfile, s)
			break
		}
	}
	j.rfile[seq] = f
	return f, nil
}

// forget closes the reader of a dropped segment.
func (j *fileJournal) forget(seq uint32) {
	j.rmu.Lock()
	defer j.rmu.Unlock()
	if f, ok := j.rfile[seq]; ok {
		f.Close()
		delete(j.rfile, seq)
	}
}

// scanChunk is how much of a segment a scan reads at once.
const scanChunk = 1 << 20

// Scan implements Journal. A frame cut short at the end of the newest
// segment is left for later (it may be a write in progress); one cut short
// in an older segment, and corrupt bytes anywhere, are skipped up to the
// next valid frame.
func (j *fileJournal) Scan(ctx context.Context, from Pos, fn func(pos Pos, payload []byte) bool) (Pos, error) {
	segs, err := j.segments()
	if err != nil || len(segs) == 0 {
		return from, err
	}
	pos := from
	if pos.seg() < segs[0] {
		pos = mkPos(segs[0], 0)
	}
	var buf []byte
	for i, seq := range segs {
		if seq < pos.seg() {
			continue
		}
		if seq > pos.seg() {
			pos = mkPos(seq, 0)
		}
		last := i == len(segs)-1
		f, err := j.reader(seq)
		if err != nil {
			return pos, err
		}
		if f == nil {
			continue // dropped since the listing
		}
		base := int64(pos.off()) // file offset of buf[0]
		buf = buf[:0]
		eof := false
		for !eof {
			if err := ctx.Err(); err != nil {
				return pos, err
			}
			if cap(buf)-len(buf) < scanChunk/2 {
				nb := make([]byte, len(buf), len(buf)+scanChunk)
				copy(nb, buf)
				buf = nb
			}
			n, err := f.ReadAt(buf[len(buf):cap(buf)], base+int64(len(buf)))
			buf = buf[:len(buf)+n]
			switch {
			case errors.Is(err, io.EOF):
				eof = true
			case err != nil:
				return pos, fmt.Errorf("tasklog: reading the journal: %w", err)
			case n == 0:
				eof = true
			}
			consumed := 0
		parse:
			for consumed < len(buf) {
				payload, n, ok, incomplete := frameAt(buf[consumed:])
				switch {
				case ok:
					p := mkPos(seq, uint32(base+int64(consumed)))
					consumed += n
					pos = mkPos(seq, uint32(base+int64(consumed)))
					if !fn(p, payload) {
						return pos, nil
					}
					continue
				case incomplete && !eof:
					break parse // read more
				case incomplete && last:
					// A write in progress, unless a whole frame follows
					// (then these bytes are a torn or corrupt frame).
					if at, complete := resync(buf[consumed:]); at > 0 && complete {
						consumed += at
						continue
					}
					return pos, nil
				case incomplete:
					consumed = len(buf) // torn end of an older segment
					break parse
				}
				at, _ := resync(buf[consumed:])
				if at < 0 {
					consumed = len(buf) // nothing like a frame in the rest
					break
				}
				consumed += at
			}
			pos = mkPos(seq, uint32(base+int64(consumed)))
			rest := copy(buf, buf[consumed:])
			buf = buf[:rest]
			base += int64(consumed)
		}
	}
	return pos, nil
}

// ReadAt implements Journal.
func (j *fileJournal) ReadAt(ctx context.Context, pos Pos) ([]byte, error) {
	f, err := j.reader(pos.seg())
	if err != nil {
		return nil, err
	}
	if f == nil {
		return nil, &GoneError{Pos: pos}
	}
	var head [frameHeader]byte
	if _, err := f.ReadAt(head[:], int64(pos.off())); err != nil {
		return nil, fmt.Errorf("tasklog: reading journal record %s: %w", pos, err)
	}
	if head[0] != frameMagic0 || head[1] != frameMagic1 {
		return nil, fmt.Errorf("tasklog: no journal record at %s", pos)
	}
	size := binary.LittleEndian.Uint32(head[2:6])
	if size > maxFrame {
		return nil, fmt.Errorf("tasklog: corrupt journal record at %s", pos)
	}
	b := make([]byte, frameHeader+int(size))
	copy(b, head[:])
	if _, err := f.ReadAt(b[frameHeader:], int64(pos.off())+frameHeader); err != nil {
		return nil, fmt.Errorf("tasklog: reading journal record %s: %w", pos, err)
	}
	payload, _, ok, _ := frameAt(b)
	if !ok {
		return nil, fmt.Errorf("tasklog: corrupt journal record at %s", pos)
	}
	return payload, nil
}

// End implements Journal: the current segment's size, read without the
// lock (a write in progress may be counted: End is an upper bound).
func (j *fileJournal) End(context.Context) (Pos, error) {
	cur, err := j.currentSeg()
	if err != nil || cur == 0 {
		return 0, err
	}
	st, err := os.Stat(filepath.Join(j.dir, segName(cur)))
	if errors.Is(err, os.ErrNotExist) {
		return mkPos(cur, 0), nil
	}
	if err != nil {
		return 0, fmt.Errorf("tasklog: %w", err)
	}
	return mkPos(cur, uint32(st.Size())), nil
}

// repairTail truncates a frame cut short at the end of the newest segment
// (a writer killed in the middle of a write), scanning from pos. It holds
// the append lock, so no write is in progress and a short frame there is
// surely torn.
func (j *fileJournal) repairTail(ctx context.Context, from Pos) error {
	if err := flock(j.lock, unix.LOCK_EX); err != nil {
		return err
	}
	defer flock(j.lock, unix.LOCK_UN) //nolint:errcheck
	cur, err := j.currentSeg()
	if err != nil || cur == 0 {
		return err
	}
	if from.seg() != cur {
		from = mkPos(cur, 0)
	}
	end, err := j.Scan(ctx, from, func(Pos, []byte) bool { return true })
	if err != nil {
		return err
	}
	if end.seg() != cur {
		return nil
	}
	path := filepath.Join(j.dir, segName(cur))
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("tasklog: %w", err)
	}
	if st.Size() > int64(end.off()) {
		if err := os.Truncate(path, int64(end.off())); err != nil {
			return fmt.Errorf("tasklog: cutting a torn record off the journal: %w", err)
		}
	}
	return nil
}

// Close implements Journal.
func (j *fileJournal) Close() error {
	j.closeOnce.Do(func() {
		j.qmu.Lock()
		j.closed = true
		for j.writing {
			// Let the group in progress finish.
			j.qmu.Unlock()
			runtime.Gosched()
			j.qmu.Lock()
		}
		j.qmu.Unlock()
		j.rmu.Lock()
		for s, f := range j.rfile {
			f.Close()
			delete(j.rfile, s)
		}
		j.rmu.Unlock()
		if j.wfile != nil {
			j.wfile.Close()
		}
		j.lock.Close()
	})
	return nil
}
