package jsengine

import (
	"runtime"
	"runtime/metrics"
	"time"
)

// memoryEvery is how often a running program's memory is read;
// gcEvery, how often at most a collection is forced to tell its garbage
// from what it holds (a program that makes garbage fast near its bound
// would otherwise have one forced every read).
const (
	memoryEvery = 5 * time.Millisecond
	gcEvery     = 50 * time.Millisecond
)

// heapMetric counts the bytes of heap objects, live and not yet swept:
// the memory a program makes the process hold (see
// codemode.Options.MaxMemoryBytes).
const heapMetric = "/memory/classes/heap/objects:bytes"

// watchMemory calls over, once, when the process's heap grows by more
// than limit bytes past its smallest size since now (past it still after
// a garbage collection, so that garbage not yet collected does not
// count), until the function it returns is called; that function waits
// for the watch to end.
func watchMemory(limit int64, over func(grown int64)) (stop func()) {
	sample := []metrics.Sample{{Name: heapMetric}}
	read := func() int64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(sample[0].Value.Uint64())
	}
	base := read()
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(memoryEvery)
		defer t.Stop()
		var collected time.Time
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			now := read()
			if now < base {
				// Garbage of before the program was collected: the
				// growth is counted from the lowest point seen, so that
				// it is not hidden by what the start's count held.
				base = now
			}
			if now-base <= limit || time.Since(collected) < gcEvery {
				continue
			}
			// Garbage counts until it is swept: what is over the bound
			// after a collection is held.
			runtime.GC()
			collected = time.Now()
			if grown := read() - base; grown > limit {
				over(grown)
				return
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}
