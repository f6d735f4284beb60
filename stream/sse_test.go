package stream_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux/stream"
)

// sseClient is a real HTTP client on one stream.
type sseClient struct {
	resp   *http.Response
	dec    *stream.Decoder
	cancel context.CancelFunc
}

func connect(t *testing.T, url string, header http.Header) *sseClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &sseClient{resp: resp, dec: stream.NewDecoder(resp.Body), cancel: cancel}
	t.Cleanup(c.close)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	return c
}

func (c *sseClient) close() {
	c.cancel()
	c.resp.Body.Close()
}

// event reads the next event, skipping heartbeats unless asked for.
func (c *sseClient) event(t *testing.T, heartbeats bool) stream.Event {
	t.Helper()
	for {
		e, err := c.dec.NextEvent()
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		if e.Name == stream.EventHeartbeat && !heartbeats {
			continue
		}
		return e
	}
}

// The wire format, line by line: a retry: field first, then per event an
// id: line, an event: line and one data: line holding the JSON envelope,
// and a blank line.
func TestSSEWireFormat(t *testing.T) {
	h := newHub(t, stream.WithHeartbeat(0))
	srv := httptest.NewServer(h.Handler(stream.HandlerOptions{Retry: 1500 * time.Millisecond}))
	t.Cleanup(srv.Close) // after the clients' cleanups: Close waits for their connections
	h.Publish(stream.EventStartOfWorkflow, "t-1", stream.StartOfWorkflow("wf", "What is 2+2?"))

	resp, err := http.Get(srv.URL + "?last_event_id=0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if cc := resp.Header.Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("Cache-Control %q", cc)
	}
	r := bufio.NewReader(resp.Body)
	var lines []string
	for len(lines) < 6 {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.TrimSuffix(l, "\n"))
	}
	if lines[0] != "retry: 1500" || lines[1] != "" || lines[2] != "id: 1" || lines[3] != "event: start_of_workflow" ||
		!strings.HasPrefix(lines[4], "data: {") || lines[5] != "" {
		t.Fatalf("lines:\n%s", strings.Join(lines, "\n"))
	}
	var env struct {
		ID    int64                      `json:"id"`
		Event string                     `json:"event"`
		Task  string                     `json:"task"`
		Time  time.Time                  `json:"time"`
		Data  stream.StartOfWorkflowData `json:"data"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[4], "data: ")), &env); err != nil {
		t.Fatal(err)
	}
	if env.ID != 1 || env.Event != "start_of_workflow" || env.Task != "t-1" || env.Time.IsZero() ||
		env.Data.WorkflowID != "wf" || len(env.Data.Input) != 1 || env.Data.Input[0].Role != "user" ||
		env.Data.Input[0].Content != "What is 2+2?" {
		t.Fatalf("envelope %+v", env)
	}
}

// End to end: replay and live events, the task filter, heartbeats, and a
// reconnection with Last-Event-ID that yields exactly the missed events.
func TestSSEResumeAndHeartbeat(t *testing.T) {
	h := newHub(t, stream.WithHeartbeat(20*time.Millisecond))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close) // after the clients' cleanups: Close waits for their connections
	for i := range 4 {
		h.Publish(stream.EventMessage, "t-1", stream.Message("m", strconv.Itoa(i))) // 1..4
		h.Publish(stream.EventMessage, "t-2", stream.Message("m", strconv.Itoa(i))) // other task
	}

	c := connect(t, srv.URL+"?task=t-1", http.Header{"Last-Event-ID": {"2"}})
	if c.dec.Retry() != 0 {
		t.Fatal("retry before any message")
	}
	var last int64
	for _, want := range []int64{3, 5, 7} {
		if e := c.event(t, false); e.ID != want || e.Task != "t-1" {
			t.Fatalf("got %+v, want id %d", e, want)
		}
		last = want
	}
	if c.dec.Retry() != stream.DefaultRetry {
		t.Fatalf("retry %v", c.dec.Retry())
	}
	// Nothing is published for a while: a heartbeat comes, with no id and
	// the id to resume from.
	hb := c.event(t, true)
	if hb.Name != stream.EventHeartbeat || hb.ID != 0 {
		t.Fatalf("heartbeat %+v", hb)
	}
	var beat stream.HeartbeatData
	if err := json.Unmarshal(hb.Data, &beat); err != nil || beat.LastEventID != last || beat.Time.IsZero() {
		t.Fatalf("heartbeat data %s: %v", hb.Data, err)
	}
	if c.dec.LastEventID() != "7" {
		t.Fatalf("decoder's last id %q", c.dec.LastEventID())
	}

	e := h.Publish(stream.EventMessage, "t-1", stream.Message("m", "live")) // 9
	if got := c.event(t, false); got.ID != e.ID {
		t.Fatalf("live event %d, want %d", got.ID, e.ID)
	}
	last = e.ID
	c.close()
	waitFor(t, "the handler to end", func() bool { return h.Stats().Subscribers == 0 })

	// Missed while away: three of task t-1 among others.
	var missed []int64
	for i := range 6 {
		task := "t-1"
		if i%2 == 1 {
			task = "t-2"
		}
		if e := h.Publish(stream.EventToolCall, task, stream.ToolCallInput("c", "s__t", nil)); task == "t-1" {
			missed = append(missed, e.ID)
		}
	}
	// The header wins over a stale query parameter, as after a browser's
	// reconnection to the same URL.
	c = connect(t, srv.URL+"?task=t-1&last_event_id=1", http.Header{"Last-Event-ID": {strconv.FormatInt(last, 10)}})
	for _, want := range missed {
		if e := c.event(t, false); e.ID != want {
			t.Fatalf("after reconnecting: %d, want %d", e.ID, want)
		}
	}
	e = h.Publish(stream.EventEndOfWorkflow, "t-1", stream.EndOfWorkflow("wf"))
	if got := c.event(t, false); got.ID != e.ID || got.Name != stream.EventEndOfWorkflow {
		t.Fatalf("live after reconnecting: %+v", got)
	}

	// The query parameter alone, for polyfills; and ?events= keeps names.
	c2 := connect(t, srv.URL+"?last_event_id="+strconv.FormatInt(missed[0], 10)+"&events=end_of_workflow,show_error", nil)
	if got := c2.event(t, false); got.ID != e.ID {
		t.Fatalf("query resume with names: %+v", got)
	}
}

// The client going away ends the handler and its subscription; so does
// closing the hub, after the queued events are written.
func TestSSEEnds(t *testing.T) {
	h, err := stream.NewHub(context.Background(), stream.WithHeartbeat(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	returned := make(chan struct{}, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { returned <- struct{}{} }()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close) // after the clients' cleanups: Close waits for their connections

	c := connect(t, srv.URL, nil)
	h.Publish("one", "", nil)
	if e := c.event(t, false); e.Name != "one" {
		t.Fatalf("got %+v", e)
	}
	c.close()
	select {
	case <-returned:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler outlived its client")
	}
	if n := h.Stats().Subscribers; n != 0 {
		t.Fatalf("%d subscribers after the client left", n)
	}

	c = connect(t, srv.URL, nil)
	waitFor(t, "the subscription", func() bool { return h.Stats().Subscribers == 1 })
	h.Publish("last", "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if e := c.event(t, false); e.Name != "last" {
		t.Fatalf("got %+v", e)
	}
	if _, err := c.dec.Next(); err != io.EOF {
		t.Fatalf("after the hub closed: %v", err)
	}
	<-returned

	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-returned
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("closed hub: %s", resp.Status)
	}
}

// Requests the handler refuses before streaming.
func TestSSERefusals(t *testing.T) {
	h := newHub(t)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close) // after the clients' cleanups: Close waits for their connections
	for _, c := range []struct {
		method, query, header string
		want                  int
	}{
		{http.MethodGet, "", "x1", http.StatusBadRequest},
		{http.MethodGet, "?last_event_id=-4", "", http.StatusBadRequest},
		{http.MethodGet, "", "99999999999999999999", http.StatusBadRequest},
		{http.MethodPost, "", "", http.StatusMethodNotAllowed},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.query, nil)
		if c.header != "" {
			req.Header.Set("Last-Event-ID", c.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s %s %q: %s %s", c.method, c.query, c.header, resp.Status, body)
		}
	}
}

// A gap reaches an SSE client as an event without an id.
func TestSSEGap(t *testing.T) {
	h := newHub(t, stream.WithMemory(4, 0), stream.WithHeartbeat(0))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close) // after the clients' cleanups: Close waits for their connections
	for range 20 {
		h.Publish("x", "", nil)
	}
	resp, err := http.Get(srv.URL + "?last_event_id=3")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := stream.NewDecoder(resp.Body)
	f, err := dec.Next()
	if err != nil {
		t.Fatal(err)
	}
	if f.HasID || f.Event != stream.EventGap {
		t.Fatalf("frame %+v", f)
	}
	e, err := dec.NextEvent()
	if err != nil || e.ID != 17 {
		t.Fatalf("after the gap: %+v %v", e, err)
	}
}

func TestParseLastEventID(t *testing.T) {
	for in, want := range map[string]int64{"": stream.Live, "  ": stream.Live, "0": 0, " 42 ": 42, "9223372036854775807": 1<<63 - 1} {
		if got, err := stream.ParseLastEventID(in); err != nil || got != want {
			t.Errorf("%q: %d %v", in, got, err)
		}
	}
	for _, in := range []string{"-1", "+1", "1e3", "0x10", "9223372036854775808", "１"} {
		var ie *stream.InvalidIDError
		if _, err := stream.ParseLastEventID(in); err == nil || !asInvalid(err, &ie) || ie.Value != in {
			t.Errorf("%q: %v", in, err)
		}
	}
}

func asInvalid(err error, target **stream.InvalidIDError) bool {
	ie, ok := err.(*stream.InvalidIDError)
	*target = ie
	return ok
}

// The decoder follows the specification's parsing rules.
func TestDecoder(t *testing.T) {
	in := "\uFEFF: comment\r\n" +
		"retry: 250\r" +
		"event: a\n" +
		"data\n" + // a field with no colon: empty value
		"data:x\n" +
		"id: 7\n" +
		"\n" +
		"event: ignored\n" + // no data: nothing dispatched, name reset
		"\n" +
		"data: y\r\n" +
		"id: bad\x00id\r\n" +
		"retry: 1x\n" +
		"\r\n" +
		"data: unfinished"
	d := stream.NewDecoder(strings.NewReader(in))
	f, err := d.Next()
	if err != nil || f.Event != "a" || f.Data != "\nx" || f.ID != "7" || !f.HasID {
		t.Fatalf("first: %+v %v", f, err)
	}
	f, err = d.Next()
	if err != nil || f.Event != "" || f.Data != "y" || f.HasID {
		t.Fatalf("second: %+v %v", f, err)
	}
	if d.Retry() != 250*time.Millisecond || d.LastEventID() != "7" {
		t.Fatalf("retry %v, last id %q", d.Retry(), d.LastEventID())
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}
