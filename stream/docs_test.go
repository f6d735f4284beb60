package stream_test

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/toolmux/toolmux/stream"
)

// Every JSON example in docs/events.md is an envelope the Event type
// reads, with a name the package defines and a payload its type decodes
// without unknown fields; every event the package defines has an example.
func TestDocsExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) == 0 {
		t.Fatal("no json example in docs/events.md")
	}
	seen := map[string]bool{}
	for _, b := range blocks {
		var env struct {
			ID    int64           `json:"id"`
			Event string          `json:"event"`
			Task  string          `json:"task"`
			Time  time.Time       `json:"time"`
			Data  json.RawMessage `json:"data"`
		}
		if err := strict(b[1], &env); err != nil {
			t.Errorf("envelope %s: %v", b[1], err)
			continue
		}
		var e stream.Event
		if err := json.Unmarshal(b[1], &e); err != nil {
			t.Errorf("event %s: %v", b[1], err)
			continue
		}
		if e.Name != env.Event || e.ID != env.ID || e.Time.IsZero() || !slices.Contains(stream.Names(), e.Name) {
			t.Errorf("example %s decoded to %+v", b[1], e)
			continue
		}
		if marker := e.Name == stream.EventGap || e.Name == stream.EventHeartbeat; marker != (e.ID == 0) {
			t.Errorf("%s: id %d (markers have none, events have one)", e.Name, e.ID)
		}
		p := stream.NewPayload(e.Name)
		if err := strict(e.Data, p); err != nil {
			t.Errorf("%s payload %s: %v", e.Name, e.Data, err)
		}
		if _, err := e.DecodeData(); err != nil {
			t.Errorf("%s: DecodeData: %v", e.Name, err)
		}
		// What the package writes reads back the same.
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var back stream.Event
		if err := json.Unmarshal(out, &back); err != nil || back.ID != e.ID || back.Name != e.Name ||
			back.Task != e.Task || !back.Time.Equal(e.Time) {
			t.Errorf("%s: round trip %s: %v", e.Name, out, err)
		}
		seen[e.Name] = true
	}
	for _, name := range stream.Names() {
		if !seen[name] {
			t.Errorf("docs/events.md has no example of %s", name)
		}
	}
	if _, err := (stream.Event{Name: "nope", Data: []byte(`{}`)}).DecodeData(); err == nil {
		t.Error("unknown event decoded")
	}
}

func strict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// The constructors produce MiroFlow's payloads field for field.
func TestConstructors(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{stream.StartOfWorkflow("w", "hi"), `{"workflow_id":"w","input":[{"role":"user","content":"hi"}]}`},
		{stream.EndOfWorkflow("w"), `{"workflow_id":"w"}`},
		{stream.Agent("browsing", "", "a1"), `{"agent_name":"browsing","display_name":"browsing","agent_id":"a1"}`},
		{stream.LLM("main", "Main"), `{"agent_name":"main","display_name":"Main"}`},
		{stream.Message("m", "tok"), `{"message_id":"m","delta":{"content":"tok"}}`},
		{stream.ToolCallInput("c", "s__t", nil), `{"tool_call_id":"c","tool_name":"s__t","tool_input":{}}`},
		{stream.ToolCallInput("c", "s__t", map[string]any{"q": "x"}), `{"tool_call_id":"c","tool_name":"s__t","tool_input":{"q":"x"}}`},
		{stream.ToolCallDelta("c", "s__t", "q", "x"), `{"tool_call_id":"c","tool_name":"s__t","delta_input":{"q":"x"}}`},
		{stream.ToolCallResult("c", "s__t", "ok"), `{"tool_call_id":"c","tool_name":"s__t","tool_input":{"result":"ok"}}`},
		{stream.ShowError("boom"), `{"error":"boom"}`},
	} {
		got, err := json.Marshal(c.v)
		if err != nil || string(got) != c.want {
			t.Errorf("%T: %s %v, want %s", c.v, got, err, c.want)
		}
	}
}
