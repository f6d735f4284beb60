package main_test

// The fleet's benchmarks (BENCHMARKS.md §17): runs/s with 1 to 8 worker
// processes, the time from a worker's SIGKILL to its run progressing on
// another worker, and a soak of runs with workers killed under them. The
// workers are real `toolmux worker` processes on an embedded NATS server,
// the model is the scripted llmtest server, the tools are the fixture's.
//
// The recovery and the soak are tests, of a size for every run of the suite
// (make test); TOOLMUX_FLEET_RECOVERY=1 and TOOLMUX_FLEET_SOAK=1 make them
// the benchmarks of BENCHMARKS.md §17b and §17c (minutes), with the same
// checks:
//
//	cd cmd/toolmux && go test -c -o /tmp/toolmux.test .
//	for i in 1 2 3 4 5 6; do flock /tmp/toolmux-bench.lock /tmp/toolmux.test -test.run '^$' \
//	    -test.bench BenchmarkFleetScaling -test.benchtime 5x -test.count 1; done | tee scaling.txt
//	TOOLMUX_FLEET_RECOVERY=1 flock /tmp/toolmux-bench.lock /tmp/toolmux.test -test.run TestFleetRecovery -test.v -test.timeout 40m
//	TOOLMUX_FLEET_SOAK=1 flock /tmp/toolmux-bench.lock /tmp/toolmux.test -test.run 'TestFleetSoak$' -test.v -test.timeout 20m
//
// (-count 1 runs in a loop interleave the variants, so that slow and fast
// moments of a shared machine spread over all of them.)

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
)

// waitModel is a scripted model whose runs are dominated by waiting: a
// task "wait MS ..." is answered, after turnDelay, by one call of the
// fixture's slow tool sleeping MS, then, after turnDelay again, by the
// answer. A run is about 2×turnDelay + MS of waiting.
func waitModel(tb testing.TB, turnDelay time.Duration) *llmtest.Server {
	re := regexp.MustCompile(`wait (\d+)`)
	return llmtest.OpenAI(tb, func(_ int, req llmtest.Request) llmtest.Reply {
		var task string
		assistants := 0
		for _, m := range req.Messages {
			switch m["role"] {
			case "user":
				if task == "" {
					task, _ = m["content"].(string)
				}
			case "assistant":
				assistants++
			}
		}
		mm := re.FindStringSubmatch(task)
		if mm == nil {
			return llmtest.Reply{Content: "no task I know"}
		}
		if assistants == 0 {
			return llmtest.Reply{Calls: []llmtest.Call{{Name: "fx__slow", Args: `{"ms": ` + mm[1] + `}`}}, Delay: turnDelay}
		}
		return llmtest.Reply{Content: "waited " + mm[1], Delay: turnDelay}
	})
}

// submitAndWait submits the runs reqs and waits for every one to end; it
// returns the final states, or an error naming a run that did not end
// done.
func submitAndWait(ctx context.Context, f *fleet.Fleet, reqs []fleet.Request) ([]*fleet.Run, error) {
	for _, r := range reqs {
		if _, _, err := f.Submit(ctx, r); err != nil {
			return nil, err
		}
	}
	out := make([]*fleet.Run, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			run, err := f.Wait(ctx, r.ID)
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("run %s: %w", r.ID, err)
			case run.Status != fleet.StatusDone:
				errs[i] = fmt.Errorf("run %s ended %s: %s", r.ID, run.Status, run.Error)
			}
			out[i] = run
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// BenchmarkFleetScaling measures runs/s with N worker processes, each
// taking one run at a time (and one row of workers taking 4 at a time),
// for runs of ~600 ms of waiting: the model answers each of its two turns
// after 200 ms, and the one tool call sleeps 200 ms. Each iteration is a
// batch of 4 runs per slot (so every variant runs the same number of
// rounds); runs/s is the runs of all iterations over their time, and
// run-ms the mean time a run spent on its worker (taken to ended).
func BenchmarkFleetScaling(b *testing.B) {
	bin := benchBinary(b)
	for _, c := range []struct{ workers, concurrency int }{{1, 1}, {2, 1}, {4, 1}, {8, 1}, {2, 4}} {
		name := fmt.Sprintf("workers=%d", c.workers)
		if c.concurrency > 1 {
			name += fmt.Sprintf(",concurrency=%d", c.concurrency)
		}
		b.Run(name, func(b *testing.B) { benchFleetScaling(b, bin, c.workers, c.concurrency) })
	}
}

func benchFleetScaling(b *testing.B, bin string, workers, concurrency int) {
	const (
		turnDelay = 200 * time.Millisecond
		toolMS    = 200
		rounds    = 4
	)
	ns := startNATS(b, b.TempDir(), 0)
	m := waitModel(b, turnDelay)
	dir := fleetWorkspace(b, m)
	f := connectFleet(b, natsURL(ns))
	var procs []*workerProc
	for i := range workers {
		procs = append(procs, startWorkerBin(b, bin, dir, natsURL(ns), "--lease", "10s", "--concurrency", strconv.Itoa(concurrency),
			"--name", fmt.Sprintf("w%d", i)))
	}
	// CPU of the workers with their servers, and of this process (the
	// NATS server, the model, the submitter).
	workersCPU := func() time.Duration {
		var d time.Duration
		for _, w := range procs {
			d += treeCPU(w.cmd.Process.Pid)
		}
		return d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	slots := workers * concurrency
	n := 0
	batch := func(k int) []*fleet.Run {
		reqs := make([]fleet.Request, k)
		for i := range reqs {
			reqs[i] = fleet.Request{ID: fmt.Sprintf("r%d", n), Task: fmt.Sprintf("wait %d (run %d)", toolMS, n)}
			n++
		}
		runs, err := submitAndWait(ctx, f, reqs)
		if err != nil {
			b.Fatal(err)
		}
		return runs
	}
	// Warm-up: every worker has started its MCP server and model client.
	batch(2 * slots)
	var measured int
	var onWorker time.Duration
	cpu0, self0 := workersCPU(), processCPU(os.Getpid())
	for b.Loop() {
		for _, r := range batch(rounds * slots) {
			onWorker += r.Ended.Sub(r.Started)
		}
		measured += rounds * slots
	}
	b.ReportMetric(float64(measured)/b.Elapsed().Seconds(), "runs/s")
	b.ReportMetric(float64(onWorker.Milliseconds())/float64(measured), "run-ms")
	b.ReportMetric(float64((workersCPU()-cpu0).Milliseconds())/float64(measured), "worker-cpu-ms/run")
	b.ReportMetric(float64((processCPU(os.Getpid())-self0).Milliseconds())/float64(measured), "nats-cpu-ms/run")
}

// processCPU is the CPU time (user and system) process pid has used, read
// from /proc (0 where there is none).
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// "PID (COMM) STATE PPID ...": utime and stime are the 14th and 15th
	// fields, the 12th and 13th after COMM; in clock ticks of 1/100 s.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// treeCPU is the CPU time of process pid and of its children alive.
func treeCPU(pid int) time.Duration {
	d := processCPU(pid)
	for _, c := range testservers.Children(pid) {
		d += processCPU(c.PID)
	}
	return d
}

// percentile is the p-th percentile (0..100) of sorted durations, by the
// nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// TestFleetRecovery kills the worker holding a run, kills times, and
// checks that another worker takes the run over and ends it done; it
// measures the time from the SIGKILL to the run progressing on the other
// worker: the first event of the run published by the other worker, as
// the fleet's events stream delivers it here. It logs the distribution
// (p50, p99, and each kill's split between the queue's redelivery and the
// resumption); timing is reported, not asserted.
//
// In the suite it kills 3 times with a lease of 2 s, workers of the
// suite's -race binary (~20 s). With TOOLMUX_FLEET_RECOVERY=1 it is the
// benchmark of BENCHMARKS.md §17b: TOOLMUX_FLEET_KILLS kills (default 20)
// with each of the leases 10 s and 2 s, workers built without the race
// detector (minutes).
func TestFleetRecovery(t *testing.T) {
	t.Parallel()
	kills, leases, bin := 3, []time.Duration{2 * time.Second}, binary
	if os.Getenv("TOOLMUX_FLEET_RECOVERY") != "" {
		kills, leases, bin = 20, []time.Duration{10 * time.Second, 2 * time.Second}, benchBinary(t)
	}
	if s := os.Getenv("TOOLMUX_FLEET_KILLS"); s != "" {
		var err error
		if kills, err = strconv.Atoi(s); err != nil || kills < 1 {
			t.Fatalf("TOOLMUX_FLEET_KILLS=%q", s)
		}
	}
	for _, lease := range leases {
		t.Run("lease="+lease.String(), func(t *testing.T) { fleetRecovery(t, bin, lease, kills) })
	}
}

// timedEvent is an event and when it reached the test.
type timedEvent struct {
	fleet.Event
	at time.Time
}

func fleetRecovery(t *testing.T, bin string, lease time.Duration, kills int) {
	const (
		turnDelay = 500 * time.Millisecond
		toolMS    = 1000
		// A run lasts ~2 s; the kill comes at a random moment of it.
		killWithin = 1800 * time.Millisecond
	)
	ns := startNATS(t, t.TempDir(), 0)
	m := waitModel(t, turnDelay)
	dir := fleetWorkspace(t, m)
	f := connectFleet(t, natsURL(ns))
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 15))
	t.Logf("seed %d", seed)
	next := 0
	start := func() *workerProc {
		w := startWorkerBin(t, bin, dir, natsURL(ns), "--lease", lease.String(), "--name", fmt.Sprintf("w%d", next))
		next++
		return w
	}
	pool := map[string]*workerProc{}
	for range 2 {
		w := start()
		pool[fmt.Sprintf("w%d", next-1)] = w
	}
	var total, redelivered, resumed, working []time.Duration
	for k := 0; len(total) < kills; k++ {
		if k > 2*kills {
			t.Fatalf("only %d of %d kills landed in a run", len(total), kills)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		id := fmt.Sprintf("rec-%d", k)
		evs := make(chan timedEvent, 256)
		var follow sync.WaitGroup
		follow.Go(func() {
			_ = f.Events(ctx, id, 0, func(e fleet.Event) bool {
				evs <- timedEvent{e, time.Now()}
				return e.Name != "end_of_workflow"
			})
		})
		if _, _, err := f.Submit(ctx, fleet.Request{ID: id, Task: fmt.Sprintf("wait %d (%s)", toolMS, id)}); err != nil {
			t.Fatal(err)
		}
		var first timedEvent
		select {
		case first = <-evs:
		case <-ctx.Done():
			t.Fatalf("run %s never started", id)
		}
		victim := first.Worker
		time.Sleep(time.Duration(rng.Int64N(int64(killWithin))))
		pool[victim].kill(t)
		killed := time.Now()
		delete(pool, victim)
		// The moment the queue handed the run to the other worker.
		var taken time.Time
		var watch sync.WaitGroup
		watch.Go(func() {
			_ = f.Watch(ctx, func(r *fleet.Run) bool {
				if r.Worker != victim && r.Status == fleet.StatusRunning {
					taken = time.Now()
					return false
				}
				return !r.Status.Final()
			}, id)
		})
		var rescue timedEvent
		over := false
		for rescue.Worker == "" {
			select {
			case e := <-evs:
				if e.Worker != victim {
					rescue = e
				}
				if e.Name == "end_of_workflow" && e.Worker == victim {
					over = true // the run ended before the kill
				}
			case <-ctx.Done():
				t.Fatalf("run %s: no event from another worker after the kill", id)
			}
			if over {
				break
			}
		}
		if !over {
			// The first event is the resumed workflow's start; the work
			// itself resumes with the model's turn or the call re-run.
			work := rescue
			for work.Name != "start_of_llm" && work.Name != "tool_call" {
				select {
				case work = <-evs:
				case <-ctx.Done():
					t.Fatalf("run %s: no turn or call resumed after the kill", id)
				}
			}
			watch.Wait()
			d := rescue.at.Sub(killed)
			total = append(total, d)
			redelivered = append(redelivered, taken.Sub(killed))
			resumed = append(resumed, rescue.at.Sub(taken))
			working = append(working, work.at.Sub(killed))
			t.Logf("kill %2d: %s in its run; progressing on %s after %s (redelivered %s, first event %q %s later, %q %s after the kill)",
				len(total), id, rescue.Worker, d.Round(time.Millisecond), taken.Sub(killed).Round(time.Millisecond),
				rescue.Name, rescue.at.Sub(taken).Round(time.Millisecond), work.Name, work.at.Sub(killed).Round(time.Millisecond))
		} else {
			t.Logf("%s ended before its worker was killed; not counted", id)
		}
		// A new worker for the dead one, then the run's end.
		pool[fmt.Sprintf("w%d", next)] = start()
		if run, err := f.Wait(ctx, id); err != nil || run.Status != fleet.StatusDone {
			t.Errorf("run %s: %+v %v", id, run, err)
		}
		cancel()
		follow.Wait()
		watch.Wait()
	}
	report := func(name string, ds []time.Duration) {
		s := slices.Clone(ds)
		slices.Sort(s)
		t.Logf("lease %s, %s over %d kills: p50 %s, p99 %s, min %s, max %s", lease, name, len(s),
			percentile(s, 50).Round(time.Millisecond), percentile(s, 99).Round(time.Millisecond),
			s[0].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
	}
	report("kill to progress elsewhere", total)
	report("kill to redelivery", redelivered)
	report("redelivery to first event", resumed)
	report("kill to the resumed turn or call", working)
}

// A run whose workers keep dying is given up after --max-deliveries
// deliveries: failed, with the reason, not retried forever; its side
// effect was made once and is not repeated by the delivery that gives up.
func TestFleetGivesUp(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, t.TempDir(), 0)
	m := appendModel(t, 0)
	dir := fleetWorkspace(t, m)
	out := filepath.Join(t.TempDir(), "effects.txt")
	f := connectFleet(t, natsURL(ns))
	w1 := startWorker(t, dir, natsURL(ns), "--name", "first", "--max-deliveries", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startAppend(t, ctx, f, w1, "doomed", "doomed", out, 60000)
	w1.kill(t)
	w2 := startWorker(t, dir, natsURL(ns), "--name", "second", "--max-deliveries", "1")
	run := waitRun(t, ctx, f, "doomed", w2)
	if run.Status != fleet.StatusFailed || run.Deliveries != 2 || run.Worker != "second" ||
		!strings.Contains(run.Error, "given up after 1 deliveries") {
		t.Errorf("run: %+v", run)
	}
	if c := countOf(lines(t, out), "doomed"); c != 1 {
		t.Errorf("the call ran %d times", c)
	}
	// The worker that gave it up takes the next run.
	if _, _, err := f.Submit(ctx, fleet.Request{ID: "next", Task: "append next to " + out + " sleeping 0"}); err != nil {
		t.Fatal(err)
	}
	if run, err := f.Wait(ctx, "next"); err != nil || run.Status != fleet.StatusDone || run.Worker != "second" {
		t.Errorf("next run: %+v %v", run, err)
	}
}

// TestFleetSoak is the soak at a size for every run of the suite: 24 runs
// on three workers, three of them killed with SIGKILL on the way. With
// TOOLMUX_FLEET_SOAK=1 it is the benchmark of BENCHMARKS.md §17c: 200 runs
// on a pool of four workers of which 20 are killed with SIGKILL at random
// moments (each replaced at once; minutes).
func TestFleetSoak(t *testing.T) {
	t.Parallel()
	if os.Getenv("TOOLMUX_FLEET_SOAK") != "" {
		fleetSoak(t, 200, 20, 4)
		return
	}
	fleetSoak(t, 24, 3, 3)
}

// soakMaxDeliveries is the soak's give-up threshold. The default (3)
// gives up a run whose three workers in a row died under it: at the soak's
// rate of kills (one every ~1.5 s in a pool of four), about one soak in
// four had such a run (given up, its side effect made once, its events
// without a gap). The soak counts the runs that needed more than 3.
const soakMaxDeliveries = 10

// fleetSoak submits runs runs, each appending its own line with the
// fixture's non-idempotent append tool, to a pool of workers (two runs at
// once each), kills kills of them with SIGKILL at random moments while
// runs remain, starting a new worker for each, and then checks that no
// run was lost (every run ended done), no side effect was repeated (no
// run's line is in the file twice) and no run's events have a gap.
func fleetSoak(t *testing.T, runs, kills, poolSize int) {
	ns := startNATS(t, t.TempDir(), 0)
	// A run: the model's first turn, the call appending the line then
	// sleeping 700 ms, the model's second turn after 400 ms; ~1.2 s.
	const perRun = 1200 * time.Millisecond
	m := appendModel(t, 400*time.Millisecond)
	dir := fleetWorkspace(t, m)
	out := filepath.Join(t.TempDir(), "effects.txt")
	f := connectFleet(t, natsURL(ns))
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 15))
	t.Logf("seed %d", seed)
	next := 0
	var pool []*workerProc
	var names []string
	start := func() {
		name := fmt.Sprintf("s%d", next)
		pool = append(pool, startWorker(t, dir, natsURL(ns), "--concurrency", "2", "--name", name,
			"--max-deliveries", strconv.Itoa(soakMaxDeliveries)))
		names = append(names, name)
		next++
	}
	killed := map[string]time.Time{}
	for range poolSize {
		start()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = fmt.Sprintf("soak-%d", i)
		if _, _, err := f.Submit(ctx, fleet.Request{ID: ids[i], Task: fmt.Sprintf("append %s to %s sleeping 700", ids[i], out)}); err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	ended := make([]*fleet.Run, runs)
	var pending sync.WaitGroup
	var mu sync.Mutex
	left := runs
	for i, id := range ids {
		pending.Go(func() {
			r, err := f.Wait(ctx, id)
			if err != nil {
				t.Errorf("run %s: %v", id, err)
			}
			mu.Lock()
			ended[i] = r
			left--
			mu.Unlock()
		})
	}
	// The kills are spread over the time the runs should take (perRun
	// per run per slot), each at a random moment of its share of it; a
	// kill running late (a new worker takes a moment to start) comes at
	// once. The loop stops killing when too few runs are left to be hit.
	every := time.Duration(float64(runs) / float64(2*poolSize) * float64(perRun) / float64(kills+1))
	done := 0
	for done < kills {
		at := began.Add(time.Duration(done)*every + every/2 + time.Duration(rng.Int64N(int64(every))))
		time.Sleep(time.Until(at))
		mu.Lock()
		l := left
		mu.Unlock()
		if l < 2 {
			break
		}
		i := rng.IntN(len(pool))
		pool[i].kill(t)
		killed[names[i]] = time.Now()
		pool = slices.Delete(pool, i, i+1)
		names = slices.Delete(names, i, i+1)
		done++
		start()
	}
	pending.Wait()
	elapsed := time.Since(began)
	if done < kills {
		t.Errorf("only %d of %d kills happened before the runs ended", done, kills)
	}
	effects := lines(t, out)
	notDone, repeated, never := 0, 0, 0
	deliveries := map[int]int{}
	unknown := 0
	for i, id := range ids {
		r := ended[i]
		if r == nil {
			notDone++
			t.Errorf("lost run %s", id)
			continue
		}
		deliveries[r.Deliveries]++
		if r.Status != fleet.StatusDone || r.Deliveries > 3 {
			t.Logf("run %s: %s after %d deliveries (%s); held by %s", id, r.Status, r.Deliveries, r.Error,
				soakHolders(ctx, f, id, began, killed))
		}
		if r.Status != fleet.StatusDone {
			notDone++
			t.Errorf("run %s not done: %s: %s", id, r.Status, r.Error)
		}
		switch c := countOf(effects, id); {
		case c > 1:
			repeated++
			t.Errorf("run %s appended its line %d times", id, c)
		case c == 0:
			// The worker died after the ledger recorded the call started
			// and before the tool ran: its outcome is unknown, and it is
			// rightly not run again.
			never++
		}
		if regexp.MustCompile(`outcome.is.unknown|outcome_unknown`).MatchString(r.Answer) {
			unknown++
		}
		checkEventSeq(t, f, id)
	}
	var ks []string
	for name, at := range killed {
		ks = append(ks, fmt.Sprintf("%s@%s", name, at.Sub(began).Round(time.Millisecond)))
	}
	slices.Sort(ks)
	t.Logf("kills: %s", strings.Join(ks, " "))
	beyond := 0
	for d, n := range deliveries {
		if d > 3 {
			beyond += n
		}
	}
	t.Logf("%d runs, %d kills in %s: %d not done, %d side effects repeated, %d never made (outcome unknown), "+
		"%d told outcome unknown; deliveries %v (%d beyond the default --max-deliveries 3); event sequences checked (gaps are errors above)",
		runs, done, elapsed.Round(time.Second), notDone, repeated, never, unknown, deliveries, beyond)
}

// soakHolders tells which workers published a run's events, from when,
// and when each was killed.
func soakHolders(ctx context.Context, f *fleet.Fleet, id string, began time.Time, killed map[string]time.Time) string {
	last, err := f.LastEventSeq(ctx, id)
	if err != nil || last == 0 {
		return "nobody (no event)"
	}
	var b strings.Builder
	held := ""
	_ = f.Events(ctx, id, 0, func(e fleet.Event) bool {
		if e.Worker != held {
			held = e.Worker
			fmt.Fprintf(&b, "%s from %s", held, e.Time.Sub(began).Round(time.Millisecond))
			if k, ok := killed[held]; ok {
				fmt.Fprintf(&b, " (killed at %s)", k.Sub(began).Round(time.Millisecond))
			}
			b.WriteString("; ")
		}
		return e.Seq < last
	})
	return b.String()
}
