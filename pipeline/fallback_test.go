package pipeline

import (
	"context"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/tool"
)

func TestFallbackByKind(t *testing.T) {
	mw, err := NewFallback([]Fallback{
		{Tools: []string{"scrape", "scrape_website"}, On: []string{"timeout", "server_unavailable"}, Target: "builtin/web_fetch", Arguments: map[string]string{"url": "url"}},
		{Tools: []string{"scrape_website"}, On: []string{"timeout"}, Target: "backup/fetch"},
	})
	if err != nil {
		t.Fatal(err)
	}
	fetched := 0
	next := &scripted{answers: map[string]func(tool.Call) *tool.Record{
		"web/scrape":         func(c tool.Call) *tool.Record { return failWith(c, tool.KindTimeout, "timed out") },
		"web/scrape_website": func(c tool.Call) *tool.Record { return failWith(c, tool.KindTimeout, "timed out") },
		"web/scrape_fast":    func(c tool.Call) *tool.Record { return failWith(c, tool.KindToolError, "unhandled errors") },
		"builtin/web_fetch": func(c tool.Call) *tool.Record {
			fetched++
			if c.Arguments["url"] == "https://down.example" {
				return failWith(c, tool.KindServerUnavailable, "no network")
			}
			if len(c.Arguments) != 1 {
				return failWith(c, tool.KindInvalidParams, "only url was mapped")
			}
			return okWith(c, tool.TextResult("fetched "+c.Arguments["url"].(string)))
		},
		"backup/fetch": func(c tool.Call) *tool.Record { return failWith(c, tool.KindServerUnavailable, "backup down") },
	}}
	h := Chain(next, mw)

	rec := h.Call(context.Background(), tool.Call{Server: "web", Tool: "scrape", Arguments: map[string]any{"url": "https://x.example", "mode": "fast"}})
	if rec.Err() != nil || rec.Result.Text() != "fetched https://x.example" || rec.Server != "web" || rec.Tool != "scrape" {
		t.Fatalf("fallback answer: %+v %v", rec, rec.Err())
	}
	if n := rec.Notes[len(rec.Notes)-1]; n.Layer != "fallback" || n.Data["target"] != "builtin/web_fetch" || n.Data["primary_error_kind"] != "timeout" {
		t.Errorf("note: %+v", rec.Notes)
	}

	// A kind not listed does not trigger, whatever the error text says.
	rec = h.Call(context.Background(), tool.Call{Server: "web", Tool: "scrape_fast", Arguments: map[string]any{"url": "u"}})
	if tool.KindOf(rec.Err()) != tool.KindToolError {
		t.Errorf("unlisted kind: %v", rec.Err())
	}

	// Every fallback fails: fallback_failed naming all of them.
	rec = h.Call(context.Background(), tool.Call{Server: "web", Tool: "scrape_website", Arguments: map[string]any{"url": "https://down.example"}})
	if tool.KindOf(rec.Err()) != tool.KindFallbackFailed || !strings.Contains(rec.Error.Message, "builtin/web_fetch") || !strings.Contains(rec.Error.Message, "backup/fetch") {
		t.Errorf("all failed: %v", rec.Err())
	}

	// A mapped argument the call lacks skips that fallback.
	before := fetched
	rec = h.Call(context.Background(), tool.Call{Server: "web", Tool: "scrape", Arguments: map[string]any{"link": "x"}})
	if fetched != before || tool.KindOf(rec.Err()) != tool.KindTimeout {
		t.Errorf("missing argument: fetched %d, %v", fetched-before, rec.Err())
	}

	// The caller's cancellation is not a reason to fall back.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before = fetched
	h.Call(ctx, tool.Call{Server: "web", Tool: "scrape", Arguments: map[string]any{"url": "u"}})
	if fetched != before {
		t.Error("fell back after the caller cancelled")
	}
}

func TestFallbackBadTarget(t *testing.T) {
	if _, err := NewFallback([]Fallback{{Tools: []string{"x"}, On: []string{"timeout"}, Target: "nofolder"}}); err == nil {
		t.Error("target without server accepted")
	}
}
