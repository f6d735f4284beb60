package main

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/toolmux/toolmux/schedule"
)

// serveGCPercent is the garbage collector's target for serve when GOGC is
// not set. A gateway's live heap is small and its allocation rate high
// (the MCP SDK allocates buffers per message on both sides of the hop), so
// at Go's default of 100 it collects every few calls and spends a fifth of
// its CPU doing so (BENCHMARKS.md §8); 400 lets the heap grow to five
// times what is live — a few tens of MB — for about a fifth less CPU per
// call. What that lets the heap keep after a burst of calls is given back
// by a releaser once the gateway is idle.
const serveGCPercent = 400

// tuneGC applies serveGCPercent unless the user chose with GOGC.
func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(serveGCPercent)
	}
}

// Idle release: the heap of a busy gateway holds garbage until the next
// collection, which an idle process does not run for minutes; the memory
// stays resident meanwhile. So once no call has ended for releaseIdle, and
// enough was allocated since the last release to be worth a collection,
// serve collects and returns the free memory to the operating system.
// Under steady load every call pushes the release back: it costs nothing
// while calls keep coming.
const (
	releaseIdle  = 2 * time.Second
	releaseAlloc = 4 << 20 // bytes allocated since the last release that make one worthwhile
)

// releaser is a schedule.Sink that releases memory after calls, as above.
type releaser struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	last    uint64 // heap bytes allocated, as of the last release
	sample  []metrics.Sample
}

func newReleaser() *releaser {
	r := &releaser{sample: []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}}
	r.last = r.allocated()
	return r
}

func (r *releaser) allocated() uint64 {
	metrics.Read(r.sample)
	if r.sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return r.sample[0].Value.Uint64()
}

// Event implements schedule.Sink: the end of a call (re)arms the release.
func (r *releaser) Event(e schedule.Event) {
	if e.Type != schedule.EventState || !e.State.Terminal() {
		return
	}
	r.arm()
}

// arm (re)arms the release: after a call, or a large request the gateway
// answered without one (gateway.Options.LargeBody).
func (r *releaser) arm() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if r.timer == nil {
		r.timer = time.AfterFunc(releaseIdle, r.release)
	} else {
		r.timer.Reset(releaseIdle)
	}
}

func (r *releaser) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if now := r.allocated(); now-r.last >= releaseAlloc {
		debug.FreeOSMemory()
		r.last = r.allocated()
	}
}

// stop cancels a pending release.
func (r *releaser) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.timer != nil {
		r.timer.Stop()
	}
}
