package main_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/toolmux/toolmux/internal/testservers"
)

// Ten subscribers of /api/events on a real `toolmux serve`, one of which
// never reads (a tiny receive buffer, so the kernel cannot hide it): the
// calls made meanwhile all complete, the nine readers see them end, and
// the stuck one, when it reads at last, is told how many events it
// missed.
func TestServeEventsStuckSubscriber(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	p := startServeProc(t, dir, t.TempDir(), "--yes")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	stuck, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	fmt.Fprintf(stuck, "GET /api/events HTTP/1.1\r\nHost: %s\r\n\r\n", p.addr)

	const readers = 9
	var (
		sawEnd  atomic.Int32 // readers that saw the shell call succeed
		started sync.WaitGroup
		wg      sync.WaitGroup
	)
	rctx, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	for range readers {
		started.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+p.addr+"/api/events", nil)
			resp, err := http.DefaultClient.Do(req)
			started.Done()
			if err != nil {
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 8<<20)
			seen := false
			for sc.Scan() {
				l := sc.Text()
				if !seen && strings.Contains(l, `"tool":"shell"`) && strings.Contains(l, `"state":"success"`) {
					seen = true
					sawEnd.Add(1)
				}
			}
		}()
	}
	started.Wait()

	// A command printing 24 MB: hundreds of tool_output events, far more
	// than a subscription buffer and the kernel's socket buffers hold.
	post := func(path, body string) (int, string) {
		resp, err := http.Post("http://"+p.addr+"/api/tools/"+path+"/call", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(b)
	}
	var calls sync.WaitGroup
	calls.Add(1)
	go func() {
		defer calls.Done()
		if code, body := post("builtin/shell", `{"arguments": {"command": "head -c 24000000 /dev/zero | tr '\\0' a"}}`); code != 200 {
			t.Errorf("shell call: %d %.300s", code, body)
		}
	}()
	for i := range 20 {
		calls.Add(1)
		go func() {
			defer calls.Done()
			if code, body := post("builtin/read_file", fmt.Sprintf(`{"arguments": {"path": "notes.txt"}, "task": "r%d"}`, i)); code != 200 {
				t.Errorf("read_file call: %d %.300s", code, body)
			}
		}()
	}
	calls.Wait()

	if !testservers.Eventually(time.Minute, func() bool { return sawEnd.Load() == readers }) {
		n := sawEnd.Load()
		t.Errorf("%d of %d reading subscribers saw the shell call end", n, readers)
	}
	stopReaders()
	wg.Wait()

	// The stuck one reads at last: what its socket held, then the gap.
	_ = stuck.SetReadDeadline(time.Now().Add(time.Minute))
	sc := bufio.NewScanner(stuck)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	gap := ""
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, `"reason":"slow"`) {
			gap = l
			break
		}
	}
	if gap == "" {
		t.Fatalf("the stuck subscriber saw no gap (scan: %v)", sc.Err())
	}
	if !strings.Contains(gap, `"missed":`) {
		t.Errorf("gap without a count: %s", gap)
	}
	t.Logf("stuck subscriber: %.200s", gap)
}
