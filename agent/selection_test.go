package agent_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
)

// A 1,000-tool catalog is narrowed: the model is offered the tools that
// match the task, find_tools and terminate; find_tools brings other tools
// into the offer; the tools used stay offered.
func TestToolSelectionLargeCatalog(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		calls(call("find_tools", `{"query": "create calendar event"}`)),
		calls(call("fixture__calendar_create_event", `{"target": "Trip to Paris"}`)),
		answer("Created the event."),
	), "", "-catalog", "1000")
	res, err := r.run(t, "What is the weather forecast for Paris tomorrow?")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "Created the event." || res.Turns != 3 || res.Calls != 2 {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	first := reqs[0].Tools
	if len(first) > 20+2 || !slices.Contains(first, "fixture__weather_get_forecast") ||
		!slices.Contains(first, "find_tools") || !slices.Contains(first, "terminate") {
		t.Fatalf("the first offer (%d tools): %v", len(first), first)
	}
	if slices.Contains(first, "fixture__calendar_create_event") {
		t.Fatalf("the first offer has a calendar tool: %v", first)
	}
	// Most of the offer is about the weather.
	weather := 0
	for _, name := range first {
		if strings.HasPrefix(name, "fixture__weather_") {
			weather++
		}
	}
	if weather < 10 {
		t.Fatalf("%d weather tools offered: %v", weather, first)
	}
	found := toolResults(reqs[1])
	if len(found) != 1 || !strings.Contains(found[0], "tools match \"create calendar event\"") ||
		!strings.Contains(found[0], "- fixture__calendar_create_event: Create a new event in a calendar.") {
		t.Fatalf("find_tools answered %q", found)
	}
	second := reqs[1].Tools
	if len(second) > 20+10+2 || !slices.Contains(second, "fixture__calendar_create_event") || !slices.Contains(second, "find_tools") {
		t.Fatalf("the second offer (%d tools): %v", len(second), second)
	}
	if !slices.Contains(reqs[2].Tools, "fixture__calendar_create_event") {
		t.Fatalf("the tool used is no longer offered: %v", reqs[2].Tools)
	}
	recs := r.calls(t, res.Task)
	if len(recs) != 1 || recs[0].Tool != "calendar_create_event" || recs[0].Error != nil {
		t.Fatalf("records: %+v", recs)
	}
	if got := toolResults(reqs[2]); got[len(got)-1] != `calendar_create_event done for "Trip to Paris"` {
		t.Fatalf("results: %q", got)
	}
}

// selection.pinned keeps a tool offered whatever the task.
func TestToolSelectionPinned(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		calls(call("fixture__echo", `{"message": "pinned"}`)),
		answer("done"),
	), `agent: {selection: {pinned: ["fixture/echo"], top_k: 5}}`, "-catalog", "1000")
	if _, err := r.run(t, "What is the weather forecast for Paris tomorrow?"); err != nil {
		t.Fatal(err)
	}
	reqs := r.model.Requests()
	for i, req := range reqs {
		if len(req.Tools) > 5+1+2 || !slices.Contains(req.Tools, "fixture__echo") || !slices.Contains(req.Tools, "fixture__weather_get_forecast") {
			t.Fatalf("offer %d (%d tools): %v", i, len(req.Tools), req.Tools)
		}
	}
}

// The generated catalog is what the tests above rely on.
func TestCatalogFixture(t *testing.T) {
	if testservers.CatalogSize != 1000 {
		t.Fatalf("catalog of %d tools", testservers.CatalogSize)
	}
	seen := map[string]bool{}
	for i := range testservers.CatalogSize {
		name, desc := testservers.CatalogTool(i)
		if seen[name] || desc == "" {
			t.Fatalf("tool %d: %q %q", i, name, desc)
		}
		seen[name] = true
	}
	for _, name := range []string{"weather_get_forecast", "calendar_create_event"} {
		if !seen[name] {
			t.Fatalf("no %s", name)
		}
	}
}

// With the text protocol, a narrowed catalog lists find_tools in the
// system prompt, and the tools it finds are listed from the next turn on.
func TestToolSelectionTextProtocol(t *testing.T) {
	t.Parallel()
	r := newRig(t, llmtest.Replies(
		textCall("toolmux", "find_tools", `{"query": "create calendar event", "limit": 3}`),
		textCall("fixture", "calendar_create_event", `{"target": "Trip"}`),
		answer("Created."),
	), `agent: {tool_protocol: text}`, "-catalog", "1000")
	res, err := r.run(t, "What is the weather forecast for Paris tomorrow?")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "Created." || res.Calls != 2 {
		t.Fatalf("result: %+v", res)
	}
	reqs := r.model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	if s := reqs[0].System; !strings.Contains(s, "### weather_get_forecast\n") || !strings.Contains(s, "### find_tools\n") ||
		strings.Contains(s, "### calendar_create_event\n") || strings.Count(s, "\n### ") > 20+2 {
		t.Fatalf("the first system prompt lists %d tools:\n%s", strings.Count(s, "\n### "), s)
	}
	if s := lastMessage(reqs[1])["content"].(string); !strings.HasPrefix(s, "Result of toolmux/find_tools:\n3 tools match") ||
		!strings.Contains(s, "- fixture/calendar_create_event: ") {
		t.Fatalf("find_tools answered %q", s)
	}
	if s := reqs[1].System; !strings.Contains(s, "### calendar_create_event\n") {
		t.Fatalf("the found tool is not listed:\n%s", s)
	}
	if s := lastMessage(reqs[2])["content"]; s != "Result of fixture/calendar_create_event:\ncalendar_create_event done for \"Trip\"" {
		t.Fatalf("result %q", s)
	}
}
