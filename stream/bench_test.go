package stream_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmux/toolmux/stream"
)

// payload is a typical tool_state event.
var payload = stream.ToolStateData{CallID: "01jd2c0000000000000000000", Batch: "01jd2b0000000000000000000",
	Server: "builtin", Tool: "read_file", State: "executing", PreviousState: "scheduled", PreviousMS: 0.2, TotalMS: 0.5}

// BenchmarkPublish measures Publish with 0, 1 and 10 subscribers, one of
// the ten never reading (it loses events from the first full buffer on).
// The readers drain as fast as they can; what they lose is reported.
func BenchmarkPublish(b *testing.B) {
	for _, subs := range []int{0, 1, 10} {
		b.Run("subscribers="+strconv.Itoa(subs), func(b *testing.B) {
			h := newHub(b)
			var wg sync.WaitGroup
			var readers []*stream.Subscription
			for i := range subs {
				s := subscribe(b, h, stream.Filter{}, stream.Live)
				if subs > 1 && i == 0 {
					continue // the stuck one
				}
				readers = append(readers, s)
				wg.Go(func() {
					for range s.Events() {
					}
				})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				h.Publish(stream.EventToolState, "t-1", payload)
			}
			b.StopTimer()
			var lost int64
			for _, s := range readers {
				lost += s.Dropped()
				s.Close()
			}
			wg.Wait()
			if len(readers) > 0 {
				b.ReportMetric(float64(lost)/float64(len(readers))/float64(b.N), "lost/op/reader")
			}
		})
	}
}

// BenchmarkDelivery measures events per second from Publish to one
// reader, the publisher pacing itself so that nothing is lost.
func BenchmarkDelivery(b *testing.B) {
	const buffer = 1 << 12
	h := newHub(b, stream.WithBuffer(buffer))
	s := subscribe(b, h, stream.Filter{}, stream.Live)
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range s.Events() {
			if got.Add(1) == int64(b.N) {
				return
			}
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 1; i <= b.N; i++ {
		h.Publish(stream.EventToolState, "t-1", payload)
		if i%(buffer/2) == 0 {
			for got.Load() < int64(i-buffer/2) {
				time.Sleep(time.Microsecond)
			}
		}
	}
	<-done
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	if s.Dropped() != 0 {
		b.Fatalf("%d lost", s.Dropped())
	}
}

// BenchmarkSSE measures events per second through the SSE handler to a
// real HTTP client decoding them.
func BenchmarkSSE(b *testing.B) {
	const buffer = 1 << 12
	h := newHub(b, stream.WithBuffer(buffer), stream.WithHeartbeat(0))
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	dec := stream.NewDecoder(resp.Body)
	waitFor(b, "the subscription", func() bool { return h.Stats().Subscribers == 1 })
	var got atomic.Int64
	done := make(chan error, 1)
	go func() {
		for got.Load() < int64(b.N) {
			e, err := dec.NextEvent()
			if err != nil {
				done <- err
				return
			}
			if e.Name == stream.EventGap {
				done <- errors.New("events lost")
				return
			}
			got.Add(1)
		}
		done <- nil
	}()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 1; i <= b.N; i++ {
		h.Publish(stream.EventToolState, "t-1", payload)
		if i%(buffer/2) == 0 {
			for got.Load() < int64(i-buffer/2) {
				time.Sleep(time.Microsecond)
			}
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}
