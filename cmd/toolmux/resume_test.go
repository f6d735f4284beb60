package main_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolmux/toolmux/stream"
)

// A client of /api/events that reconnects with Last-Event-ID gets exactly
// the events it missed, also across a restart of serve: they are replayed
// from the task log, then the stream goes on live.
func TestServeEventsResumeAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	data := t.TempDir()
	p := startServeProc(t, dir, data)
	for i := range 5 {
		resp, err := http.Post("http://"+p.addr+"/api/tools/builtin/read_file/call", "application/json",
			strings.NewReader(fmt.Sprintf(`{"arguments": {"path": "notes.txt"}, "task": "t%d"}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// Everything published so far, read from the start.
	all := readEvents(t, p.addr, "0", func(e stream.Event) bool {
		return e.Name == stream.EventToolCall && e.Task == "t4" && strings.Contains(string(e.Data), `"result"`)
	})
	if len(all) < 5*3 {
		t.Fatalf("only %d events for 5 calls", len(all))
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, p.stderr.String())
	}

	// A client that saw only the first third resumes against a new serve.
	p2 := startServeProc(t, dir, data)
	k := len(all) / 3
	last := all[len(all)-1].ID
	got := readEvents(t, p2.addr, fmt.Sprint(all[k-1].ID), func(e stream.Event) bool { return e.ID == last })
	want := all[k:]
	if len(got) != len(want) {
		t.Fatalf("resumed after %d: got %d events, want %d", all[k-1].ID, len(got), len(want))
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].Name != want[i].Name || got[i].Task != want[i].Task || string(got[i].Data) != string(want[i].Data) {
			t.Fatalf("event %d: got %d %s %s, want %d %s %s", i, got[i].ID, got[i].Name, got[i].Data, want[i].ID, want[i].Name, want[i].Data)
		}
	}

	// And the stream goes on live after the replay, with new ids.
	resp, err := http.Post("http://"+p2.addr+"/api/tools/builtin/read_file/call", "application/json",
		strings.NewReader(`{"arguments": {"path": "notes.txt"}, "task": "after"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	more := readEvents(t, p2.addr, fmt.Sprint(last), func(e stream.Event) bool { return e.Task == "after" && e.Name == stream.EventToolCall })
	if more[0].ID != last+1 {
		t.Errorf("first event after the restart has id %d, want %d", more[0].ID, last+1)
	}
}

// readEvents reads /api/events after the event id from, skipping markers
// (heartbeats), until stop returns true for an event, which is included.
func readEvents(t *testing.T, addr, from string, stop func(stream.Event) bool) []stream.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/events", nil)
	req.Header.Set("Last-Event-ID", from)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/events: %s", resp.Status)
	}
	dec := stream.NewDecoder(resp.Body)
	var out []stream.Event
	for {
		e, err := dec.NextEvent()
		if err != nil {
			t.Fatalf("after %d events: %v", len(out), err)
		}
		if e.ID == 0 {
			if e.Name == stream.EventGap {
				t.Fatalf("gap while resuming: %s", e.Data)
			}
			continue
		}
		out = append(out, e)
		if stop(e) {
			return out
		}
	}
}
