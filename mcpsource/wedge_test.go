package mcpsource_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/tool"
)

// wedgeable starts the fixture with quick health checks: a call waiting
// pingAfter gets the session pinged, and a ping unanswered for 300ms means
// the server is wedged.
func wedgeable(t *testing.T, hc mcpsource.HealthCheck, args ...string) *mcpsource.Source {
	t.Helper()
	if hc.PingTimeout == 0 {
		hc.PingTimeout = 300 * time.Millisecond
	}
	s, err := mcpsource.New(mcpsource.Config{
		Name:           "fx",
		Transport:      mcpsource.Stdio,
		Command:        testservers.Fixture(t),
		Args:           args,
		ConnectTimeout: 10 * time.Second,
		MinBackoff:     10 * time.Millisecond,
		StopGrace:      500 * time.Millisecond,
		HealthCheck:    hc,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitWedged waits for the server to say it stopped reading, which it
// says once it has.
func waitWedged(t *testing.T, s *mcpsource.Source) {
	t.Helper()
	ok := testservers.Eventually(10*time.Second, func() bool {
		return strings.Contains(s.StderrTail(10), "wedged on purpose")
	})
	if !ok {
		t.Errorf("the server never wedged: stderr %q", s.StderrTail(10))
	}
}

// wantWedged checks that err says the server stopped answering, quoting
// its stderr.
func wantWedged(t *testing.T, err error) {
	t.Helper()
	var te *tool.Error
	if !errors.As(err, &te) || te.Kind != tool.KindServerUnavailable {
		t.Fatalf("got %v, want server_unavailable", err)
	}
	if !errors.Is(err, mcpsource.ErrWedged) {
		t.Errorf("error does not wrap ErrWedged: %v", err)
	}
	if !strings.Contains(te.Message, "stopped answering") {
		t.Errorf("message does not say the server stopped answering: %q", te.Message)
	}
	if !strings.Contains(te.Detail, "wedged on purpose") {
		t.Errorf("detail does not quote the server's stderr: %q", te.Detail)
	}
}

func TestServerThatStopsReadingIsRestartedAndItsNextCallSucceeds(t *testing.T) {
	s := wedgeable(t, mcpsource.HealthCheck{PingAfter: 300 * time.Millisecond})
	first, _ := strconv.Atoi(call(t, s, "pid", nil).Text())

	// The call that wedges the server is in flight when the wedge is found:
	// it ends with server_unavailable instead of waiting for its timeout.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := s.Call(ctx, "wedge", nil)
	if ctx.Err() != nil {
		t.Fatalf("the in-flight call waited for its own deadline: %v", err)
	}
	wantWedged(t, err)

	h := s.Health()
	if h.State != tool.StateDegraded || !strings.Contains(h.Error, "stopped answering") || h.Restarts != 0 {
		t.Errorf("health after the wedge: %+v", h)
	}
	if !testservers.Eventually(10*time.Second, func() bool { return testservers.ProcessGone(first) }) {
		t.Errorf("the wedged process %d was not stopped", first)
	}

	second, _ := strconv.Atoi(call(t, s, "pid", nil).Text())
	if second == first || second == 0 {
		t.Errorf("the next call ran in process %d, the wedged one was %d", second, first)
	}
	if h := s.Health(); h.State != tool.StateReady || h.Restarts != 1 || h.PID != second {
		t.Errorf("health after the restart: %+v", h)
	}
}

// A call that times out has the session pinged at once: a server that
// answers nothing is found out by its first timeout, not after PingAfter.
func TestTimedOutCallFindsTheWedge(t *testing.T) {
	s := wedgeable(t, mcpsource.HealthCheck{PingAfter: time.Hour})
	first, _ := strconv.Atoi(call(t, s, "pid", nil).Text())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := s.Call(ctx, "wedge", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wedge: %v, want the caller's deadline", err)
	}
	ok := testservers.Eventually(10*time.Second, func() bool {
		return strings.Contains(s.Health().Error, "stopped answering") && testservers.ProcessGone(first)
	})
	if !ok {
		t.Fatalf("the wedge was not found after the timeout: %+v", s.Health())
	}
	if got := call(t, s, "echo", map[string]any{"message": "back"}).Text(); got != "Echo: back" {
		t.Errorf("after the restart: %q", got)
	}
	if h := s.Health(); h.Restarts != 1 {
		t.Errorf("restarts %d, want 1", h.Restarts)
	}
}

// A server that stopped reading lets its stdin pipe fill; writes to it
// then block, deadline or not. Dropping the session must free every call
// stuck in such a write.
func TestCallsBlockedOnAFullPipeEnd(t *testing.T) {
	s := wedgeable(t, mcpsource.HealthCheck{PingAfter: 500 * time.Millisecond})
	call(t, s, "pid", nil)
	wedged := make(chan error, 1)
	go func() {
		_, err := s.Call(context.Background(), "wedge", nil)
		wedged <- err
	}()
	waitWedged(t, s)
	big := strings.Repeat("x", 16<<10)
	const n = 32 // 512 KiB, far more than a pipe holds
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.Call(context.Background(), "echo", map[string]any{"message": big})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if tool.KindOf(err) != tool.KindServerUnavailable {
			t.Fatalf("call %d: %v, want server_unavailable", i, err)
		}
	}
	wantWedged(t, <-wedged)
	if got := call(t, s, "echo", map[string]any{"message": "after"}).Text(); got != "Echo: after" {
		t.Errorf("after the restart: %q", got)
	}
}

// With an interval, an idle session is pinged too: a wedge is found
// before any call waits on it.
func TestKeepAliveFindsAWedgeBetweenCalls(t *testing.T) {
	s := wedgeable(t, mcpsource.HealthCheck{PingAfter: time.Hour, Interval: 200 * time.Millisecond})
	first, _ := strconv.Atoi(call(t, s, "pid", nil).Text())
	// A call cancelled by its caller says nothing about the server, so
	// only the keep-alive can find the wedge.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitWedged(t, s)
		cancel()
	}()
	if _, err := s.Call(ctx, "wedge", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("wedge: %v", err)
	}
	ok := testservers.Eventually(10*time.Second, func() bool {
		h := s.Health()
		return h.State == tool.StateDegraded && strings.Contains(h.Error, "keep-alive") && testservers.ProcessGone(first)
	})
	if !ok {
		t.Fatalf("the keep-alive did not find the wedge: %+v", s.Health())
	}
}

// A slow tool on a server that answers pings is left alone, however long
// it takes.
func TestSlowCallOnAnAnsweringServerIsLeftAlone(t *testing.T) {
	s := wedgeable(t, mcpsource.HealthCheck{PingAfter: 100 * time.Millisecond})
	pid := s.Health().PID
	if got := call(t, s, "slow", map[string]any{"ms": 1500}).Text(); got != "slept 1500ms" {
		t.Fatalf("slow: %q", got)
	}
	h := s.Health()
	if h.State != tool.StateReady || h.Restarts != 0 || h.Error != "" {
		t.Errorf("health after a slow call on a healthy server: %+v (pid before %d)", h, pid)
	}
}

// With the checks off, nothing pings the server: not a call that waits
// past PingAfter, not a call that times out, not the keep-alive. The
// server notes every ping it gets; the same calls with the checks on get
// it pinged, so the server's record can show one.
func TestDisabledHealthCheckSendsNoPing(t *testing.T) {
	for _, disabled := range []bool{true, false} {
		t.Run(fmt.Sprintf("disabled=%v", disabled), func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "marker")
			s := wedgeable(t, mcpsource.HealthCheck{Disabled: disabled, PingAfter: 50 * time.Millisecond, Interval: 50 * time.Millisecond}, "-marker", marker)
			call(t, s, "pid", nil)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if _, err := s.Call(ctx, "slow", map[string]any{"ms": 400}); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("slow: %v, want the caller's deadline", err)
			}
			// A call that outlasts PingAfter and several Intervals, ended
			// by the server; what was due is done or in flight by then.
			if got := call(t, s, "slow", map[string]any{"ms": 400}).Text(); got != "slept 400ms" {
				t.Fatalf("slow: %q", got)
			}
			pinged := func() bool {
				b, _ := os.ReadFile(marker)
				return slices.Contains(strings.Split(string(b), "\n"), "ping")
			}
			if disabled {
				if pinged() {
					t.Error("the server was pinged with the checks off")
				}
			} else if !testservers.Eventually(10*time.Second, pinged) {
				t.Error("the server was never pinged with the checks on")
			}
			if h := s.Health(); h.State != tool.StateReady || h.Error != "" {
				t.Errorf("health: %+v", h)
			}
		})
	}
}

// An HTTP or SSE server that stops answering (its port still accepts
// connections) is wedged too.
func TestHTTPServerThatStopsAnsweringIsWedged(t *testing.T) {
	for _, transport := range []string{mcpsource.StreamableHTTP, mcpsource.SSE} {
		t.Run(transport, func(t *testing.T) {
			srv := testservers.NewServer(testservers.Options{})
			var stuck atomic.Bool
			var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
			if transport == mcpsource.SSE {
				h = mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return srv }, nil)
			}
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if stuck.Load() {
					// Read the request first: the server notices a client
					// that hangs up only once it has.
					_, _ = io.Copy(io.Discard, r.Body)
					<-r.Context().Done()
					return
				}
				h.ServeHTTP(w, r)
			}))
			defer ts.Close()
			defer func() {
				for ss := range srv.Sessions() {
					ss.Close()
				}
			}()
			s, err := mcpsource.New(mcpsource.Config{Name: "web", Transport: transport, URL: ts.URL,
				MinBackoff: time.Millisecond, HealthCheck: mcpsource.HealthCheck{PingAfter: 200 * time.Millisecond, PingTimeout: 300 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			call(t, s, "echo", map[string]any{"message": "up"})
			stuck.Store(true)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err = s.Call(ctx, "echo", map[string]any{"message": "into the void"})
			if ctx.Err() != nil || !errors.Is(err, mcpsource.ErrWedged) || tool.KindOf(err) != tool.KindServerUnavailable {
				t.Fatalf("call to a server that stopped answering: %v", err)
			}
			if h := s.Health(); h.State != tool.StateDegraded {
				t.Errorf("health: %+v", h)
			}
			stuck.Store(false)
			if got := call(t, s, "echo", map[string]any{"message": "back"}).Text(); got != "Echo: back" {
				t.Errorf("after the server answers again: %q", got)
			}
			if h := s.Health(); h.State != tool.StateReady || h.Restarts != 1 {
				t.Errorf("health after reconnecting: %+v", h)
			}
		})
	}
}

// OnSessionLost is told of every session lost, whatever the cause.
func TestSessionLostIsReported(t *testing.T) {
	s := wedgeable(t, mcpsource.HealthCheck{PingAfter: 200 * time.Millisecond})
	var lost atomic.Int32
	s.OnSessionLost(func() { lost.Add(1) })
	call(t, s, "pid", nil)
	if _, err := s.Call(context.Background(), "crash", nil); tool.KindOf(err) != tool.KindServerUnavailable {
		t.Fatalf("crash: %v", err)
	}
	call(t, s, "pid", nil)
	if _, err := s.Call(context.Background(), "wedge", nil); !errors.Is(err, mcpsource.ErrWedged) {
		t.Fatalf("wedge: %v", err)
	}
	// The source tells of a loss after it has failed the calls waiting on
	// the session (from the goroutine that found it), so the call can
	// return first.
	testservers.Eventually(10*time.Second, func() bool { return lost.Load() >= 2 })
	if n := lost.Load(); n != 2 {
		t.Errorf("OnSessionLost called %d times, want 2 (a crash and a wedge)", n)
	}
	if h := s.Health(); h.Restarts != 1 {
		t.Errorf("restarts %d, want 1 (%s)", h.Restarts, fmt.Sprint(h))
	}
}

// A healthy server is not pinged while its calls answer within PingAfter;
// a call that takes longer has it pinged, and goes on.
func TestPingsOnlyForCallsThatWait(t *testing.T) {
	srv := testservers.NewServer(testservers.Options{})
	var pings atomic.Int32
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "ping" {
				pings.Add(1)
			}
			return next(ctx, method, req)
		}
	})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer ts.Close()
	defer func() {
		for ss := range srv.Sessions() {
			ss.Close()
		}
	}()
	const pingAfter = 300 * time.Millisecond
	s, err := mcpsource.New(mcpsource.Config{Name: "web", Transport: mcpsource.StreamableHTTP, URL: ts.URL,
		HealthCheck: mcpsource.HealthCheck{PingAfter: pingAfter}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A call is timed from outside, so the longest took at least what
	// the source saw: one that took PingAfter on a loaded machine may
	// rightly have had a ping, one that did not may not.
	var longest time.Duration
	for i := range 200 {
		start := time.Now()
		call(t, s, "echo", map[string]any{"message": strconv.Itoa(i)})
		longest = max(longest, time.Since(start))
	}
	if n := pings.Load(); n != 0 && longest < pingAfter {
		t.Errorf("%d pings for 200 calls that answered within %s (the longest in %s)", n, pingAfter, longest)
	}
	if got := call(t, s, "slow", map[string]any{"ms": 1000}).Text(); got != "slept 1000ms" {
		t.Fatalf("slow: %q", got)
	}
	if n := pings.Load(); n == 0 {
		t.Error("a call that waited 1s was never pinged about")
	}
	if h := s.Health(); h.State != tool.StateReady || h.Restarts != 0 {
		t.Errorf("health: %+v", h)
	}
}

// The reference server answers pings while it works on a long operation:
// the health check leaves it alone (a ping the server answered, with an
// error or not, is an answer).
func TestEverythingServerAnswersPingsDuringALongCall(t *testing.T) {
	s, err := mcpsource.New(mcpsource.Config{Name: "everything", Transport: mcpsource.Stdio,
		Command: testservers.NodeBin(t, "mcp-server-everything"), ConnectTimeout: 30 * time.Second,
		HealthCheck: mcpsource.HealthCheck{PingAfter: 200 * time.Millisecond, PingTimeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Call(context.Background(), "trigger-long-running-operation", map[string]any{"duration": 2, "steps": 4}); err != nil {
		t.Fatal(err)
	}
	if h := s.Health(); h.State != tool.StateReady || h.Restarts != 0 || h.Error != "" {
		t.Errorf("health after a long call: %+v", h)
	}
}
