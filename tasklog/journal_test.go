package tasklog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

var bg = context.Background()

func newJournal(t testing.TB, dir string, segBytes int64) *fileJournal {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	j, err := openFileJournal(dir, false, segBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

type scanned struct {
	pos     Pos
	payload string
}

func scanAll(t testing.TB, j *fileJournal, from Pos) ([]scanned, Pos) {
	t.Helper()
	var out []scanned
	end, err := j.Scan(bg, from, func(p Pos, b []byte) bool {
		out = append(out, scanned{p, string(b)})
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, end
}

func payloads(s []scanned) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = x.payload
	}
	return out
}

// Appended records come back in order, at the positions Append gave, and
// one by one through ReadAt, across segments.
func TestJournalAppendScanReadAt(t *testing.T) {
	j := newJournal(t, "", 300)
	var want []string
	var firsts []Pos
	for i := range 40 {
		p := fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("x", i*3))
		pos, err := j.Append(bg, []byte(p))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, p)
		firsts = append(firsts, pos)
	}
	// Two payloads of one call are adjacent.
	pos, err := j.Append(bg, []byte(`{"a":1}`), []byte(`{"b":2}`))
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, `{"a":1}`, `{"b":2}`)
	firsts = append(firsts, pos)

	got, end := scanAll(t, j, 0)
	if strings.Join(payloads(got), "\n") != strings.Join(want, "\n") {
		t.Fatalf("scan:\n%v\nwant\n%v", payloads(got), want)
	}
	for i := range firsts {
		if got[i].pos != firsts[i] {
			t.Errorf("record %d at %s, Append said %s", i, got[i].pos, firsts[i])
		}
		if i > 0 && got[i].pos <= got[i-1].pos {
			t.Errorf("positions not increasing: %s after %s", got[i].pos, got[i-1].pos)
		}
	}
	for _, g := range got {
		b, err := j.ReadAt(bg, g.pos)
		if err != nil || string(b) != g.payload {
			t.Errorf("ReadAt(%s) = %q, %v; want %q", g.pos, b, err, g.payload)
		}
	}
	segs, _ := j.segments()
	if len(segs) < 5 {
		t.Errorf("%d segments for 40 records of 300-byte segments", len(segs))
	}
	// Scanning from the end finds nothing; from the middle, the rest.
	if more, e := scanAll(t, j, end); len(more) != 0 || e != end {
		t.Errorf("from the end: %v, %s", more, e)
	}
	if rest, _ := scanAll(t, j, got[20].pos); len(rest) != len(got)-20 || rest[0].payload != want[20] {
		t.Errorf("from record 20: %d records", len(rest))
	}
	if e, err := j.End(bg); err != nil || e != end {
		t.Errorf("End %s %v, scan ended at %s", e, err, end)
	}
	// Stopping early returns the position after the last record taken.
	n := 0
	stop, err := j.Scan(bg, 0, func(Pos, []byte) bool { n++; return n < 3 })
	if err != nil || stop != got[3].pos {
		t.Errorf("stopped at %s %v, want %s", stop, err, got[3].pos)
	}
}

// writeFrames writes the frames of payloads as one segment file.
func writeFrames(t testing.TB, dir string, seq uint32, payloads ...string) []byte {
	t.Helper()
	var b []byte
	for _, p := range payloads {
		b = appendFrame(b, []byte(p))
	}
	if err := os.WriteFile(filepath.Join(dir, segName(seq)), b, 0o600); err != nil {
		t.Fatal(err)
	}
	setCurrent(t, dir, seq)
	return b
}

func setCurrent(t testing.TB, dir string, seq uint32) {
	t.Helper()
	b := []byte{byte(seq), byte(seq >> 8), byte(seq >> 16), byte(seq >> 24)}
	if err := os.WriteFile(filepath.Join(dir, lockName), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A write cut short at any byte (a process killed in the middle of it)
// loses that record and nothing else: a scan stops before it while it
// may still be written, skips it once a later record follows (another
// process appended after the crash), and the repair at open cuts it off.
func TestJournalTornWriteAtEveryByte(t *testing.T) {
	recs := []string{`{"type":"call","id":"a"}`, `{"type":"step","id":"b","pad":"ÿ-not-a-magic"}`, `{"type":"call","id":"c"}`}
	full := writeFrames(t, t.TempDir(), 1, recs...)
	starts := []int{0}
	for _, r := range recs[:len(recs)-1] {
		starts = append(starts, starts[len(starts)-1]+frameHeader+len(r))
	}
	for cut := 0; cut < len(full); cut++ {
		dir := t.TempDir()
		// Records wholly before the cut survive.
		whole := 0
		for i, s := range starts {
			if s+frameHeader+len(recs[i]) <= cut {
				whole = i + 1
			}
		}
		if err := os.WriteFile(filepath.Join(dir, segName(1)), full[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		setCurrent(t, dir, 1)
		j := newJournal(t, dir, 1<<20)
		got, end := scanAll(t, j, 0)
		if strings.Join(payloads(got), "|") != strings.Join(recs[:whole], "|") {
			t.Fatalf("cut at %d: %v, want %v", cut, payloads(got), recs[:whole])
		}
		// Another process appends after the torn bytes.
		if _, err := j.Append(bg, []byte(`{"after":true}`)); err != nil {
			t.Fatal(err)
		}
		got2, _ := scanAll(t, j, end)
		if len(got2) != 1 || got2[0].payload != `{"after":true}` {
			t.Fatalf("cut at %d: after the torn record: %v", cut, payloads(got2))
		}
		all, _ := scanAll(t, j, 0)
		if len(all) != whole+1 {
			t.Fatalf("cut at %d: %d records in all, want %d", cut, len(all), whole+1)
		}
		for _, g := range all {
			if b, err := j.ReadAt(bg, g.pos); err != nil || string(b) != g.payload {
				t.Fatalf("cut at %d: ReadAt(%s): %q %v", cut, g.pos, b, err)
			}
		}
	}
	// The repair cuts a torn tail off, and only that.
	for cut := 0; cut < len(full); cut++ {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segName(1)), full[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		setCurrent(t, dir, 1)
		j := newJournal(t, dir, 1<<20)
		before, end := scanAll(t, j, 0)
		if err := j.repairTail(bg, 0); err != nil {
			t.Fatal(err)
		}
		st, _ := os.Stat(filepath.Join(dir, segName(1)))
		if st.Size() != int64(end.off()) {
			t.Fatalf("cut at %d: repaired to %d bytes, the last whole record ends at %d", cut, st.Size(), end.off())
		}
		after, _ := scanAll(t, j, 0)
		if len(after) != len(before) {
			t.Fatalf("cut at %d: the repair lost records", cut)
		}
	}
}

// A byte changed anywhere (a bad disk, a stray write) costs the record it
// falls in, never the others, and never returns a changed payload.
func TestJournalCorruptionAtEveryByte(t *testing.T) {
	recs := []string{`{"id":"a","v":"first"}`, `{"id":"b","v":"second"}`, `{"id":"c","v":"third"}`, `{"id":"d","v":"fourth"}`}
	full := writeFrames(t, t.TempDir(), 1, recs...)
	for at := 0; at < len(full); at++ {
		for _, flip := range []byte{0x01, 0xFF} {
			dir := t.TempDir()
			b := bytes.Clone(full)
			b[at] ^= flip
			if err := os.WriteFile(filepath.Join(dir, segName(1)), b, 0o600); err != nil {
				t.Fatal(err)
			}
			setCurrent(t, dir, 1)
			j := newJournal(t, dir, 1<<20)
			got, _ := scanAll(t, j, 0)
			seen := map[string]bool{}
			for _, g := range got {
				seen[g.payload] = true
			}
			lost := 0
			for _, r := range recs {
				if !seen[r] {
					lost++
				}
			}
			if len(got) != len(recs)-lost || lost > 1 {
				// A changed length may hide the next frame until a later
				// frame lets the scan resynchronise: never more than the
				// damaged one, with four records and the damage in one.
				t.Fatalf("byte %d ^%#x: got %v", at, flip, payloads(got))
			}
			for _, g := range got {
				if !slicesContains(recs, g.payload) {
					t.Fatalf("byte %d ^%#x: a payload not written: %q", at, flip, g.payload)
				}
			}
		}
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Goroutines appending at once: every record lands once, each goroutine's
// in its order, in whole frames, across segment rotations.
func TestJournalConcurrentAppenders(t *testing.T) {
	j := newJournal(t, "", 4096)
	const workers, n = 16, 300
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range n {
				var err error
				if i%7 == 0 {
					_, err = j.Append(bg, []byte(fmt.Sprintf("%d-%d", w, i)), []byte(fmt.Sprintf("%d-%d+", w, i)))
				} else {
					_, err = j.Append(bg, []byte(fmt.Sprintf("%d-%d", w, i)))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, _ := scanAll(t, j, 0)
	checkAppenders(t, payloads(got), workers, n)
}

// checkAppenders verifies records "W-I" (and "W-I+" right after each I
// divisible by 7) of workers appending n each.
func checkAppenders(t *testing.T, got []string, workers, n int) {
	t.Helper()
	next := make([]int, workers)
	for k := 0; k < len(got); k++ {
		w, i, ok := parseWI(got[k])
		if !ok || w >= workers {
			t.Fatalf("record %q", got[k])
		}
		if i != next[w] {
			t.Fatalf("worker %d: record %d after %d", w, i, next[w]-1)
		}
		next[w]++
		if i%7 == 0 {
			k++
			if k >= len(got) || got[k] != got[k-1]+"+" {
				t.Fatalf("the two records of one append were separated at %d", k)
			}
		}
	}
	for w, c := range next {
		if c != n {
			t.Errorf("worker %d: %d records, want %d", w, c, n)
		}
	}
}

func parseWI(s string) (int, int, bool) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, false
	}
	w, err1 := strconv.Atoi(a)
	i, err2 := strconv.Atoi(b)
	return w, i, err1 == nil && err2 == nil
}

// journalAppenderEnv makes the test binary append records to a journal
// instead of running tests (TestJournalAppendersInProcesses).
const journalAppenderEnv = "TASKLOG_JOURNAL_APPENDER"

// JournalAppenderMain is what a process started by
// TestJournalAppendersInProcesses runs: "DIR WORKER N".
func journalAppenderMain(arg string) int {
	f := strings.Fields(arg)
	w, _ := strconv.Atoi(f[1])
	n, _ := strconv.Atoi(f[2])
	j, err := openFileJournal(f[0], false, 2048)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer j.Close()
	for i := range n {
		ps := [][]byte{[]byte(fmt.Sprintf("%d-%d", w, i))}
		if i%7 == 0 {
			ps = append(ps, []byte(fmt.Sprintf("%d-%d+", w, i)))
		}
		if _, err := j.Append(bg, ps...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// Processes appending to one journal at once (toolmux serve and toolmux
// call share a data directory) take turns: every record once, in order
// per process, across the segments they start while racing.
func TestJournalAppendersInProcesses(t *testing.T) {
	dir := t.TempDir()
	const procs, n = 6, 400
	var cmds []*exec.Cmd
	for w := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d", journalAppenderEnv, dir, w, n))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	j := newJournal(t, dir, 2048)
	got, _ := scanAll(t, j, 0)
	checkAppenders(t, payloads(got), procs, n)
	segs, _ := j.segments()
	t.Logf("%d records in %d segments", len(got), len(segs))
}

// A process killed while it appends leaves whole records behind it, and
// the journal takes appends after it.
func TestJournalKilledAppender(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d", journalAppenderEnv, dir, 0, 1<<30))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	j := newJournal(t, dir, 2048)
	for {
		got, _ := scanAll(t, j, 0)
		if len(got) > 2000 {
			break
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if err := j.repairTail(bg, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(bg, []byte("after")); err != nil {
		t.Fatal(err)
	}
	got, _ := scanAll(t, j, 0)
	ps := payloads(got)
	if ps[len(ps)-1] != "after" {
		t.Fatalf("last record %q", ps[len(ps)-1])
	}
	next := 0
	for k := 0; k < len(ps)-1; k++ {
		w, i, ok := parseWI(ps[k])
		if !ok || w != 0 || i != next {
			t.Fatalf("record %d: %q, want 0-%d", k, ps[k], next)
		}
		next++
		if i%7 == 0 && k+1 < len(ps)-1 {
			// The second payload of the append may have been torn off,
			// but only at the very end.
			k++
			if ps[k] != ps[k-1]+"+" {
				t.Fatalf("record %d: %q after %q", k, ps[k], ps[k-1])
			}
		}
	}
	t.Logf("%d records survived the kill", next)
}

// A failed write (a full disk) fails the appends of its group, leaves no
// partial frame behind, and the next append works.
func TestJournalWriteFailure(t *testing.T) {
	j := newJournal(t, "", 1<<20)
	if _, err := j.Append(bg, []byte("one")); err != nil {
		t.Fatal(err)
	}
	full := errors.New("no space left on device")
	j.faults = func(_ uint32, b []byte) (int, error) { return len(b) / 2, full }
	if _, err := j.Append(bg, []byte("two")); !errors.Is(err, full) {
		t.Fatalf("append on a full disk: %v", err)
	}
	j.faults = nil
	if _, err := j.Append(bg, []byte("three")); err != nil {
		t.Fatal(err)
	}
	got, _ := scanAll(t, j, 0)
	if strings.Join(payloads(got), ",") != "one,three" {
		t.Fatalf("records %v", payloads(got))
	}
	st, _ := os.Stat(filepath.Join(j.dir, segName(1)))
	if want := int64(2*frameHeader + len("one") + len("three")); st.Size() != want {
		t.Errorf("segment of %d bytes, want %d", st.Size(), want)
	}
}

// FuzzScan reads arbitrary bytes as a segment: never a panic, never a
// payload that was not framed with its CRC, and the bytes framed before
// the junk come back whole.
func FuzzScan(f *testing.F) {
	f.Add(appendFrame(appendFrame(nil, []byte(`{"a":1}`)), []byte(`{"b":2}`)), []byte("x"))
	f.Add([]byte{0xFF, 'J', 0xFF, 0xFF, 0xFF, 0x0F, 0, 0, 0, 0}, []byte{})
	f.Add([]byte{0xFF, 'J', 3, 0, 0, 0}, appendFrame(nil, []byte("ok")))
	f.Fuzz(func(t *testing.T, junk, tail []byte) {
		dir := t.TempDir()
		head := appendFrame(nil, []byte(`{"first":true}`))
		seg := append(append(bytes.Clone(head), junk...), appendFrame(nil, tail)...)
		if err := os.WriteFile(filepath.Join(dir, segName(1)), seg, 0o600); err != nil {
			t.Fatal(err)
		}
		setCurrent(t, dir, 1)
		j := newJournal(t, dir, 1<<20)
		got, _ := scanAll(t, j, 0)
		if len(got) == 0 || got[0].payload != `{"first":true}` {
			t.Fatalf("the first frame: %v", payloads(got))
		}
		for _, g := range got {
			b, err := j.ReadAt(bg, g.pos)
			if err != nil || string(b) != g.payload {
				t.Fatalf("ReadAt(%s): %v", g.pos, err)
			}
		}
	})
}
