package mcpsource

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// answerTasks is a server's side of tasks/get and tasks/cancel: every
// task is completed.
type answerTasks struct{}

func (answerTasks) RoundTrip(req *http.Request) (*http.Response, error) {
	body := `{"jsonrpc":"2.0","id":"x","result":{"resultType":"complete","taskId":"t","status":"completed","result":{"content":[{"type":"text","text":"done"}]}}}`
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
}

// FuzzTaskSSE holds the event-stream rewriter of tasks.go to what a
// server's stream may hold: it never panics, passes a stream without a
// CreateTaskResult on byte for byte, and replaces the call's
// CreateTaskResult with the task's answer.
func FuzzTaskSSE(f *testing.F) {
	f.Add([]byte("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}\n\n"))
	f.Add([]byte("data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resultType\":\"task\",\"taskId\":\"t\",\"pollIntervalMs\":1}}\n\n"))
	f.Add([]byte("event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\r\n\r\ndata: x"))
	f.Add([]byte(": comment\n\ndata:\ndata:\n\n" + strings.Repeat("y", 5000)))
	f.Fuzz(func(t *testing.T, in []byte) {
		tr := &taskRoundTripper{base: answerTasks{}, on: new(atomic.Bool)}
		req, _ := http.NewRequest(http.MethodPost, "http://server/mcp", nil)
		src := io.NopCloser(bytes.NewReader(in))
		r := &taskSSEReader{t: tr, req: req, id: []byte("1"), src: src, r: bufio.NewReaderSize(src, 64)}
		out, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("reading: %v", err)
		}
		if !bytes.Contains(in, []byte(`"task"`)) && !bytes.Equal(out, in) {
			t.Fatalf("a stream without a task changed:\n%q\n%q", in, out)
		}
	})
}

// sseThrough reads in through the rewriter, for the call of id 1.
func sseThrough(t *testing.T, in string, size int) string {
	t.Helper()
	tr := &taskRoundTripper{base: answerTasks{}, on: new(atomic.Bool)}
	req, _ := http.NewRequest(http.MethodPost, "http://server/mcp", nil)
	src := io.NopCloser(strings.NewReader(in))
	out, err := io.ReadAll(&taskSSEReader{t: tr, req: req, id: []byte("1"), src: src, r: bufio.NewReaderSize(src, size)})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// The call's CreateTaskResult, whatever the reader's buffer cuts its line
// into, becomes the task's answer; the events around it pass on as they
// are; another call's is left alone.
func TestTaskSSERewrite(t *testing.T) {
	progress := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n"
	task := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resultType\":\"task\",\"taskId\":\"t\",\"status\":\"working\",\"pollIntervalMs\":1}}\n\n"
	for _, size := range []int{16, 64, 4096} {
		out := sseThrough(t, progress+task, size)
		if !strings.HasPrefix(out, progress) || !strings.Contains(out, `"text":"done"`) || strings.Contains(out, `"resultType":"task"`) {
			t.Errorf("buffer %d: %q", size, out)
		}
	}
	other := strings.Replace(task, `"id":1`, `"id":2`, 1)
	if out := sseThrough(t, other, 4096); out != other {
		t.Errorf("another call's task: %q", out)
	}
}

// flakyTasks is a server's side of tasks/get that fails the first fails
// times (HTTP 503, no JSON-RPC answer), then completes; it counts the
// tasks/cancel it is sent.
type flakyTasks struct {
	fails           int32
	gets, cancelled atomic.Int32
}

func (f *flakyTasks) RoundTrip(req *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(req.Body)
	resp := func(status int, body string) *http.Response {
		return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: req}
	}
	switch {
	case bytes.Contains(b, []byte(`"tasks/cancel"`)):
		f.cancelled.Add(1)
		return resp(http.StatusOK, `{"jsonrpc":"2.0","id":"x","result":{"resultType":"complete"}}`), nil
	case f.gets.Add(1) <= f.fails:
		return resp(http.StatusServiceUnavailable, "unavailable"), nil
	}
	return answerTasks{}.RoundTrip(req)
}

// A tasks/get that fails now and then is tried again; one that keeps
// failing fails the call, and the server's task is cancelled rather than
// left running for nobody.
func TestTaskPollFailures(t *testing.T) {
	created := []byte(`{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","taskId":"t","status":"working","pollIntervalMs":1}}`)
	for _, c := range []struct {
		fails   int32
		ok      bool
		cancels int32
	}{{0, true, 0}, {maxTaskGetFailures - 1, true, 0}, {100, false, 1}} {
		server := &flakyTasks{fails: c.fails}
		tr := &taskRoundTripper{base: server, on: new(atomic.Bool)}
		req, _ := http.NewRequest(http.MethodPost, "http://server/mcp", nil)
		out, ok, err := tr.follow(req, []byte("1"), created)
		if !ok || (err == nil) != c.ok || c.ok && !bytes.Contains(out, []byte(`"text":"done"`)) {
			t.Errorf("%d failures: %q %v %v", c.fails, out, ok, err)
		}
		if n := server.cancelled.Load(); n != c.cancels {
			t.Errorf("%d failures: %d cancellations, want %d", c.fails, n, c.cancels)
		}
	}
}
