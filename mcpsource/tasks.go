package mcpsource

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/toolmux/toolmux/internal/jsonscan"
)

// Upstream MCP tasks (the io.modelcontextprotocol/tasks extension,
// SEP-2663). A streamable HTTP source declares the extension; a server
// that offers it may answer a tools/call with a CreateTaskResult instead
// of the tool's result. The go-sdk knows nothing of tasks (it would read
// such an answer as an empty result), so the source's HTTP transport
// follows the task before the go-sdk sees the answer: it polls tasks/get
// (waiting the pollIntervalMs the server gives) until the task is final
// and hands the go-sdk the answer the call would have had — the task's
// result, or its error — as if the server had answered at once. A call
// cancelled meanwhile cancels the task (tasks/cancel). To everything above
// the source the call is an ordinary call.

// tasksExtension is the extension's name.
const tasksExtension = "io.modelcontextprotocol/tasks"

// Bounds of following a task.
const (
	// maxTaskAnswer bounds the answer read to find a CreateTaskResult:
	// one is small; a larger answer is passed on as it is.
	maxTaskAnswer = 16 << 10
	// minTaskPoll and maxTaskPoll bound the server's pollIntervalMs.
	minTaskPoll = 20 * time.Millisecond
	maxTaskPoll = 10 * time.Second
	// maxTaskGet bounds a tasks/get answer (it inlines the result).
	maxTaskGet = 256 << 20
	// maxTaskGetFailures is how many tasks/get in a row may fail (a
	// connection reset, a server restarting behind a balancer) before the
	// call fails, and the server's task is cancelled.
	maxTaskGetFailures = 3
)

// taskRoundTripper follows the tasks a server answers tools/call with,
// once the server has said it offers them (on).
type taskRoundTripper struct {
	base http.RoundTripper
	on   *atomic.Bool
	next atomic.Uint64
}

func (t *taskRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	var id json.RawMessage
	if t.on.Load() && req.Method == http.MethodPost && req.GetBody != nil && req.ContentLength >= 0 && req.ContentLength <= maxRegisterBody {
		if body, err := req.GetBody(); err == nil {
			b, err := io.ReadAll(io.LimitReader(body, maxRegisterBody))
			body.Close()
			if m := jsonscan.Scan(b); err == nil && m.Closed && string(m.Method) == `"tools/call"` && len(m.ID) > 0 {
				id = json.RawMessage(append([]byte(nil), m.ID...))
			}
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil || id == nil || resp.Body == nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		head, err := io.ReadAll(io.LimitReader(resp.Body, maxTaskAnswer+1))
		if err != nil || len(head) > maxTaskAnswer {
			resp.Body = readCloser{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
			return resp, nil
		}
		resp.Body.Close()
		if out, ok, err := t.follow(req, id, head); ok {
			if err != nil {
				return nil, err
			}
			head = out
		}
		resp.Body = io.NopCloser(bytes.NewReader(head))
		resp.ContentLength = int64(len(head))
		resp.Header.Del("Content-Length")
	case "text/event-stream":
		resp.Body = &taskSSEReader{t: t, req: req, id: id, src: resp.Body, r: bufio.NewReader(resp.Body)}
	}
	return resp, nil
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	c io.Closer
}

func (r readCloser) Close() error { return r.c.Close() }

// createTask is what a CreateTaskResult says.
type createTask struct {
	ID     json.RawMessage `json:"id"`
	Result *struct {
		ResultType     string  `json:"resultType"`
		TaskID         string  `json:"taskId"`
		PollIntervalMs float64 `json:"pollIntervalMs"`
	} `json:"result"`
}

// follow follows the task msg creates, if it is a CreateTaskResult
// answering id (ok), to the answer the call would have had.
func (t *taskRoundTripper) follow(req *http.Request, id json.RawMessage, msg []byte) (out []byte, ok bool, err error) {
	var ct createTask
	if json.Unmarshal(msg, &ct) != nil || ct.Result == nil || ct.Result.ResultType != "task" || ct.Result.TaskID == "" ||
		!bytes.Equal(bytes.TrimSpace(ct.ID), bytes.TrimSpace(id)) {
		return nil, false, nil
	}
	out, err = t.poll(req, id, ct.Result.TaskID, pollInterval(ct.Result.PollIntervalMs))
	return out, true, err
}

func pollInterval(ms float64) time.Duration {
	return min(max(time.Duration(ms*float64(time.Millisecond)), minTaskPoll), maxTaskPoll)
}

// detailedTask is what tasks/get says.
type detailedTask struct {
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage"`
	PollIntervalMs float64         `json:"pollIntervalMs"`
	Result         json.RawMessage `json:"result"`
	Error          json.RawMessage `json:"error"`
}

// errTaskInput ends a call whose task asks the client for input, which
// the source cannot relay.
var errTaskInput = errors.New("the server's task asks for input (input_required), which toolmux cannot relay to a client")

// poll gets task taskID until it is final, and returns the JSON-RPC
// answer to id it stands for. The call's cancellation cancels the task.
func (t *taskRoundTripper) poll(req *http.Request, id json.RawMessage, taskID string, wait time.Duration) ([]byte, error) {
	ctx := req.Context()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			t.cancelTask(req, taskID)
			return nil, context.Cause(ctx)
		case <-time.After(wait):
		}
		raw, err := t.request(ctx, req, "tasks/get", taskID)
		var dt detailedTask
		if err == nil {
			if uerr := json.Unmarshal(raw, &dt); uerr != nil {
				err = fmt.Errorf("tasks/get: %w", uerr)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				t.cancelTask(req, taskID)
				return nil, context.Cause(ctx)
			}
			if failures++; failures < maxTaskGetFailures {
				continue
			}
			// Given up: the server's task must not run on for nobody.
			t.cancelTask(req, taskID)
			return nil, fmt.Errorf("following the server's task %s (%d tasks/get in a row failed): %w", taskID, failures, err)
		}
		failures = 0
		switch dt.Status {
		case "completed":
			return answer(id, "result", dt.Result), nil
		case "failed":
			e := dt.Error
			if len(e) == 0 {
				e, _ = json.Marshal(map[string]any{"code": -32603, "message": "the server's task failed: " + dt.StatusMessage})
			}
			return answer(id, "error", e), nil
		case "cancelled":
			e, _ := json.Marshal(map[string]any{"code": -32603, "message": "the server cancelled its task " + taskID + ": " + dt.StatusMessage})
			return answer(id, "error", e), nil
		case "input_required":
			t.cancelTask(req, taskID)
			e, _ := json.Marshal(map[string]any{"code": -32603, "message": errTaskInput.Error()})
			return answer(id, "error", e), nil
		}
		if dt.PollIntervalMs > 0 {
			wait = pollInterval(dt.PollIntervalMs)
		}
	}
}

func answer(id json.RawMessage, key string, v json.RawMessage) []byte {
	if len(v) == 0 {
		v = json.RawMessage("{}")
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, key: v})
	return b
}

// cancelTask tells the server the call's task is cancelled, bounded.
func (t *taskRoundTripper) cancelTask(req *http.Request, taskID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), 5*time.Second)
	defer cancel()
	_, _ = t.request(ctx, req, "tasks/cancel", taskID)
}

// request makes a tasks/* request of the server, on the call's session
// (its Mcp-Session-Id and protocol version), and returns its result.
func (t *taskRoundTripper) request(ctx context.Context, call *http.Request, method, taskID string) (json.RawMessage, error) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "toolmux-task-" + strconv.FormatUint(t.next.Add(1), 10),
		"method": method, "params": map[string]any{"taskId": taskID}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, call.URL.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for _, h := range []string{"Mcp-Session-Id", "Mcp-Protocol-Version"} {
		if v := call.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	req.Header.Set("Mcp-Method", method)
	req.Header.Set("Mcp-Name", taskID)
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxTaskGet))
	if err != nil {
		return nil, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		b = lastSSEAnswer(b)
	}
	var m struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: HTTP %d: not a JSON-RPC answer", method, resp.StatusCode)
	}
	if m.Error != nil {
		return nil, fmt.Errorf("%s: %d %s", method, m.Error.Code, m.Error.Message)
	}
	return m.Result, nil
}

// lastSSEAnswer is the data of the last event of an event stream.
func lastSSEAnswer(b []byte) []byte {
	var last []byte
	for _, line := range bytes.Split(b, []byte("\n")) {
		if d, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:")); ok {
			last = bytes.TrimSpace(d)
		}
	}
	return last
}

// taskSSEReader passes an event stream through event by event, replacing
// the answer to the call, when it is a CreateTaskResult, with the answer
// the task comes to.
type taskSSEReader struct {
	t   *taskRoundTripper
	req *http.Request
	id  json.RawMessage
	src io.ReadCloser
	r   *bufio.Reader
	out []byte
	err error
}

func (s *taskSSEReader) Close() error { return s.src.Close() }

func (s *taskSSEReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.out, s.err = s.event()
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// event reads one event (through its blank line), rewritten if it is the
// call's CreateTaskResult.
func (s *taskSSEReader) event() ([]byte, error) {
	var ev, data []byte
	long := false // the event has a line too long to be a task's
	for {
		start := len(ev)
		var err error
		for {
			var piece []byte
			piece, err = s.r.ReadSlice('\n')
			ev = append(ev, piece...)
			if err != bufio.ErrBufferFull {
				break
			}
			// A long line (a large result): kept whole in ev, which
			// is passed on, but never taken for a task's answer.
			if len(ev)-start > maxTaskAnswer {
				long = true
			}
		}
		line := bytes.TrimRight(ev[start:], "\r\n")
		if d, ok := bytes.CutPrefix(line, []byte("data:")); ok && !long {
			data = append(data, bytes.TrimSpace(d)...)
		}
		if err != nil {
			return ev, err
		}
		if len(line) == 0 {
			break
		}
	}
	if long {
		return ev, nil
	}
	if len(data) == 0 || len(data) >= maxTaskAnswer {
		return ev, nil
	}
	out, ok, err := s.t.follow(s.req, s.id, data)
	if !ok {
		return ev, nil
	}
	if err != nil {
		return nil, err
	}
	return append(append([]byte("event: message\ndata: "), out...), "\n\n"...), nil
}
