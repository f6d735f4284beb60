package jsjournal_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tasklog/jsjournal"
)

// rec is a journal record as the task log writes it (what the journal
// reads of it: type, id, task).
func rec(typ, id, task string) []byte {
	return []byte(fmt.Sprintf(`{"v":1,"type":%q,"id":%q,"task":%q,"at":1}`, typ, id, task))
}

type scanned struct {
	pos     tasklog.Pos
	payload string
}

func scanAll(t testing.TB, j tasklog.Journal, from tasklog.Pos) ([]scanned, tasklog.Pos) {
	t.Helper()
	var out []scanned
	end, err := j.Scan(bg, from, func(p tasklog.Pos, b []byte) bool {
		out = append(out, scanned{p, string(b)})
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, end
}

// Appended records come back in order at the positions Append gave (the
// stream's sequences), through Scan from any position and through ReadAt;
// End is after them; a scan stopped early says where to go on.
func TestAppendScanReadAt(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	j := openJournal(t, connect(t, s), jsjournal.Config{})
	var want []string
	var firsts []tasklog.Pos
	for i := range 30 {
		task := fmt.Sprintf("task-%d", i%3)
		if i%5 == 0 {
			task = "" // records of no task (events, retention)
		}
		p := rec("step", fmt.Sprintf("r%d", i), task)
		pos, err := j.Append(bg, p)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, string(p))
		firsts = append(firsts, pos)
	}
	a, b := rec("task.end", "e1", "x.y z*>"), rec("step", "e2", "x.y z*>") // a task id no subject could hold
	pos, err := j.Append(bg, a, b)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, string(a), string(b))
	firsts = append(firsts, pos)

	got, end := scanAll(t, j, 0)
	if len(got) != len(want) {
		t.Fatalf("%d records scanned, %d appended", len(got), len(want))
	}
	for i := range want {
		if got[i].payload != want[i] {
			t.Fatalf("record %d: %s, want %s", i, got[i].payload, want[i])
		}
		if i > 0 && got[i].pos <= got[i-1].pos {
			t.Fatalf("positions not increasing: %d after %d", got[i].pos, got[i-1].pos)
		}
		if i < len(firsts) && got[i].pos != firsts[i] {
			t.Errorf("record %d at %d, Append said %d", i, got[i].pos, firsts[i])
		}
		b, err := j.ReadAt(bg, got[i].pos)
		if err != nil || string(b) != got[i].payload {
			t.Errorf("ReadAt(%d) = %s, %v", got[i].pos, b, err)
		}
	}
	if e, err := j.End(bg); err != nil || e != end {
		t.Errorf("End %d %v, the scan ended at %d", e, err, end)
	}
	if more, e := scanAll(t, j, end); len(more) != 0 || e != end {
		t.Errorf("from the end: %v, %d", more, e)
	}
	if rest, _ := scanAll(t, j, got[20].pos); len(rest) != len(got)-20 || rest[0].payload != want[20] {
		t.Errorf("from record 20: %d records", len(rest))
	}
	n := 0
	stop, err := j.Scan(bg, 0, func(tasklog.Pos, []byte) bool { n++; return n < 3 })
	if err != nil || stop != got[3].pos {
		t.Errorf("stopped at %d %v, want %d", stop, err, got[3].pos)
	}
	// A payload that is not a record is refused before anything is sent.
	var ve *tasklog.ValidationError
	if _, err := j.Append(bg, []byte(`not json`)); !errors.As(err, &ve) {
		t.Errorf("a payload that is no record: %v", err)
	}
}

// A record re-sent (a retry after an acknowledgement was lost) is stored
// once: the second append answers the first's position.
func TestDuplicateStoredOnce(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	j := openJournal(t, connect(t, s), jsjournal.Config{})
	p := rec("call", "call-1", "t")
	first, err := j.Append(bg, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(bg, rec("step", "s-1", "t")); err != nil {
		t.Fatal(err)
	}
	again, err := j.Append(bg, p)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Errorf("the re-sent record at %d, the first at %d", again, first)
	}
	got, _ := scanAll(t, j, 0)
	if len(got) != 2 {
		t.Fatalf("%d records, want 2: %v", len(got), got)
	}
}

// Records the stream's limits dropped read as *tasklog.GoneError, and a
// scan starts at the first record kept.
func TestRetentionByStreamLimits(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	j := openJournal(t, connect(t, s), jsjournal.Config{MaxBytes: 4096})
	var positions []tasklog.Pos
	for i := range 100 {
		p, err := j.Append(bg, rec("step", fmt.Sprintf("r%03d-%s", i, strings.Repeat("x", 40)), "t"))
		if err != nil {
			t.Fatal(err)
		}
		positions = append(positions, p)
	}
	var ge *tasklog.GoneError
	if _, err := j.ReadAt(bg, positions[0]); !errors.As(err, &ge) || ge.Pos != positions[0] {
		t.Fatalf("ReadAt of a dropped record: %v", err)
	}
	got, _ := scanAll(t, j, 0)
	if len(got) == 0 || len(got) >= 100 || got[len(got)-1].pos != positions[99] {
		t.Fatalf("%d records kept of 100 under a 4 KiB limit", len(got))
	}
}

// Records acknowledged before the NATS server stops are all there after
// it starts again on the same data directory, and the journal (its
// connection reconnected) goes on appending after them.
func TestServerRestartLosesNothing(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, dir, 0)
	p := port(s)
	j := openJournal(t, connect(t, s), jsjournal.Config{})
	const n = 200
	for i := range n {
		if _, err := j.Append(bg, rec("step", fmt.Sprintf("before-%d", i), fmt.Sprintf("t%d", i%7))); err != nil {
			t.Fatal(err)
		}
	}
	s.Shutdown()
	s.WaitForShutdown()
	startServer(t, dir, p)
	// The connection reconnects in the background; appends before it has
	// fail, and the task log retries them: so does this test, with the
	// same ids (stored once).
	var err error
	for range 500 {
		if _, err = j.Append(bg, rec("step", "after", "t0")); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	got, _ := scanAll(t, j, 0)
	if len(got) != n+1 {
		t.Fatalf("%d records after the restart, want %d", len(got), n+1)
	}
	for i := range n {
		if want := string(rec("step", fmt.Sprintf("before-%d", i), fmt.Sprintf("t%d", i%7))); got[i].payload != want {
			t.Fatalf("record %d: %s, want %s", i, got[i].payload, want)
		}
	}
}

// A task claimed by a second owner (the first presumed dead) refuses the
// first owner's later writes, as an *OwnershipError, atomically with the
// write: nothing of the stale owner's lands after the new claim. The new
// owner writes, renews its claim; the stale one can renew nothing.
func TestStaleOwnerRefused(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	old := openJournal(t, connect(t, s), jsjournal.Config{})
	if _, err := old.Claim(bg, "run-1", "worker-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Append(bg, rec("step", "a-1", "run-1")); err != nil {
		t.Fatal(err)
	}
	// Another task of the old owner is not affected by run-1's takeover.
	if _, err := old.Claim(bg, "run-2", "worker-a"); err != nil {
		t.Fatal(err)
	}

	neu := openJournal(t, connect(t, s), jsjournal.Config{})
	if _, err := neu.Claim(bg, "run-1", "worker-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := neu.Append(bg, rec("step", "b-1", "run-1")); err != nil {
		t.Fatal(err)
	}

	var oe *jsjournal.OwnershipError
	_, err := old.Append(bg, rec("step", "a-2", "run-1"))
	if !errors.As(err, &oe) || oe.Task != "run-1" {
		t.Fatalf("the stale owner's write: %v", err)
	}
	// Refused at once from then on, and the renewal too.
	if _, err := old.Append(bg, rec("step", "a-3", "run-1")); !errors.As(err, &oe) {
		t.Fatalf("the stale owner's next write: %v", err)
	}
	if _, err := old.Renew(bg, "run-1"); !errors.As(err, &oe) {
		t.Fatalf("the stale owner's renewal: %v", err)
	}
	if _, err := old.Append(bg, rec("step", "a-4", "run-2")); err != nil {
		t.Fatalf("the old owner's other task: %v", err)
	}
	if _, err := neu.Renew(bg, "run-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := neu.Append(bg, rec("step", "b-2", "run-1")); err != nil {
		t.Fatalf("after renewing: %v", err)
	}

	got, _ := scanAll(t, neu, 0)
	var ids []string
	for _, g := range got {
		h, err := tasklog.ParseRecordHead([]byte(g.payload))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, h.ID)
	}
	if strings.Join(ids, ",") != "a-1,b-1,a-4,b-2" {
		t.Fatalf("records %v, want a-1,b-1,a-4,b-2", ids)
	}
}

// The head of a record is read from its own fields, never from the
// bulky call record or events after them (which may hold any text), and
// a payload that is not a record is a *tasklog.ValidationError.
func TestParseRecordHead(t *testing.T) {
	call := []byte(`{"v":1,"type":"call","id":"c1","task":"run-1","at":5,"call":{"session":"main","kind":"","started":1,"ended":2,"duration":1},` +
		`"record":{"server":"fx","tool":"echo","arguments":{"task":"decoy","id":"decoy","type":"step"}}}`)
	h, err := tasklog.ParseRecordHead(call)
	if err != nil || h != (tasklog.RecordHead{V: 1, Type: "call", ID: "c1", Task: "run-1"}) {
		t.Fatalf("head %+v %v", h, err)
	}
	for _, bad := range []string{``, `[]`, `{"v":1}`, `{"v":1,"type":"step"}`, `{"v":1,"id":"x"}`} {
		var ve *tasklog.ValidationError
		if _, err := tasklog.ParseRecordHead([]byte(bad)); !errors.As(err, &ve) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// Task ids become subject tokens that are one token, safe, and distinct.
func TestToken(t *testing.T) {
	seen := map[string]string{}
	for _, id := range []string{"", "_", "run-1", "06h0z7c9d2k8", "_run-1", "a.b", "a b", "a*", "a>", "ü", "__"} {
		tok := jsjournal.Token(id)
		if prev, dup := seen[tok]; dup {
			t.Errorf("%q and %q share the token %q", prev, id, tok)
		}
		seen[tok] = id
		if tok == "" || strings.ContainsAny(tok, ".*> \t\r\n") {
			t.Errorf("%q: token %q", id, tok)
		}
	}
	if jsjournal.Token("06h0z7c9d2k8") != "06h0z7c9d2k8" {
		t.Error("toolmux's own ids are kept as they are")
	}
}

// Goroutines of two processes' journals (two connections) appending at
// once, some to claimed runs: every record lands once, each goroutine's
// in its order, and every position Append gave holds its record.
func TestConcurrentAppenders(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	journals := []*jsjournal.Journal{
		openJournal(t, connect(t, s), jsjournal.Config{}),
		openJournal(t, connect(t, s), jsjournal.Config{}),
	}
	const workers, n = 8, 100
	for w := range workers {
		if w%2 == 0 {
			if _, err := journals[w%2].Claim(bg, fmt.Sprintf("run-%d", w), "w"); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	at := map[tasklog.Pos]string{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			j := journals[w%2]
			for i := range n {
				id := fmt.Sprintf("%d-%d", w, i)
				p := rec("step", id, fmt.Sprintf("run-%d", w))
				pos, err := j.Append(bg, p)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				at[pos] = string(p)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	got, _ := scanAll(t, journals[0], 0)
	if len(got) != workers*n {
		t.Fatalf("%d records, want %d", len(got), workers*n)
	}
	next := make([]int, workers)
	for _, g := range got {
		if at[g.pos] != g.payload {
			t.Fatalf("position %d holds %s, Append said %s", g.pos, g.payload, at[g.pos])
		}
		h, _ := tasklog.ParseRecordHead([]byte(g.payload))
		var w, i int
		fmt.Sscanf(h.ID, "%d-%d", &w, &i)
		if i != next[w] {
			t.Fatalf("worker %d: record %d after %d", w, i, next[w]-1)
		}
		next[w]++
	}
}

// startServerProcess runs a NATS server as a process of its own (this
// test binary), so that the test can kill it with SIGKILL.
func startServerProcess(t *testing.T, dir string, port int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", serverEnv, dir, port))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// Records acknowledged before the server process is killed with SIGKILL
// (no shutdown, no flush of its own) are all there when a new server
// starts on the same directory: an acknowledgement means the record is in
// the server's files (the operating system's, not yet synced: a power cut
// is another matter, docs/fleet-notes.md).
func TestServerKilledLosesNothingAcknowledged(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := startServerProcess(t, dir, port)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	var nc *nats.Conn
	for range 500 {
		if nc, err = nats.Connect(url, nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1)); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	j := openJournal(t, js, jsjournal.Config{})
	const n = 300
	for i := range n {
		if _, err := j.Append(bg, rec("step", fmt.Sprintf("k-%d", i), "run-1")); err != nil {
			t.Fatal(err)
		}
	}
	srv.Process.Signal(syscall.SIGKILL)
	srv.Wait()
	startServerProcess(t, dir, port)
	var got []scanned
	for range 1000 {
		got = nil
		_, err = j.Scan(bg, 0, func(p tasklog.Pos, b []byte) bool {
			got = append(got, scanned{p, string(b)})
			return true
		})
		if err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d records after the kill, %d acknowledged", len(got), n)
	}
	for i, g := range got {
		if want := string(rec("step", fmt.Sprintf("k-%d", i), "run-1")); g.payload != want {
			t.Fatalf("record %d: %s, want %s", i, g.payload, want)
		}
	}
}

// A record larger than the server's max_payload is refused before it is
// sent, as a *tasklog.ValidationError, and the journal goes on.
func TestRecordBoundByMaxPayload(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	j := openJournal(t, connect(t, s), jsjournal.Config{}) // max_payload 1 MiB by default
	big := []byte(fmt.Sprintf(`{"v":1,"type":"step","id":"big","task":"t","at":1,"pad":%q}`, strings.Repeat("x", 1<<20)))
	var ve *tasklog.ValidationError
	if _, err := j.Append(bg, big); !errors.As(err, &ve) {
		t.Fatalf("a record over max_payload: %v", err)
	}
	if _, err := j.Append(bg, rec("step", "small", "t")); err != nil {
		t.Fatal(err)
	}
	if got, _ := scanAll(t, j, 0); len(got) != 1 {
		t.Fatalf("%d records", len(got))
	}
}
