package pipeline

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/toolmux/toolmux/tool"
)

func TestRecordMasksSecretsAndRecordsOnce(t *testing.T) {
	red, err := newRedactor(RedactOptions{Keys: []string{"X-Session"}, Patterns: []string{`internal-[0-9]{4}`}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sunk []*tool.Record
	sink := RecorderFunc(func(_ context.Context, r *tool.Record) { mu.Lock(); sunk = append(sunk, r); mu.Unlock() })
	var sent map[string]any
	next := HandlerFunc(func(_ context.Context, c tool.Call) *tool.Record {
		sent = c.Arguments
		res := &tool.Result{
			Content:    []tool.Content{{Type: tool.ContentText, Text: "token is sk-abcdefghijklmnopqrstuvwxyz123 ok; id internal-1234"}},
			Structured: map[string]any{"password": "hunter2", "list": []any{map[string]any{"Api-Key": "k"}}},
		}
		return okWith(c, res)
	})
	h := Chain(next, newRecord(red, sink, slog.New(slog.DiscardHandler), Limits{}.withDefaults()).middleware)
	args := map[string]any{
		"query":   "weather",
		"api_key": "abc123",
		"nested":  map[string]any{"Authorization": "Bearer abcdefghijklmnop", "x_session": "s1"},
		"url":     "https://example.com/x?token=secret123&page=2",
		"note":    "my key is AKIAABCDEFGHIJKLMNOP",
	}
	rec := h.Call(context.Background(), tool.Call{Server: "s", Tool: "t", Arguments: args})

	if sent["api_key"] != "abc123" || sent["nested"].(map[string]any)["Authorization"] != "Bearer abcdefghijklmnop" {
		t.Fatalf("the tool must receive the real arguments: %v", sent)
	}
	if args["api_key"] != "abc123" {
		t.Fatal("the caller's arguments were modified")
	}
	a := rec.Arguments
	nested := a["nested"].(map[string]any)
	checks := map[string]any{
		"api_key":            a["api_key"],
		"nested.auth":        nested["Authorization"],
		"nested.x_session":   nested["x_session"],
		"note (AWS pattern)": a["note"],
	}
	for what, v := range checks {
		if !strings.Contains(v.(string), Masked) {
			t.Errorf("%s not masked: %v", what, v)
		}
	}
	if a["query"] != "weather" {
		t.Errorf("harmless value changed: %v", a["query"])
	}
	if u := a["url"].(string); !strings.Contains(u, "token="+Masked) || !strings.Contains(u, "page=2") {
		t.Errorf("URL query secret: %q", u)
	}
	text := rec.Result.Text()
	if strings.Contains(text, "sk-abc") || strings.Contains(text, "internal-1234") || !strings.Contains(text, "ok;") {
		t.Errorf("result text: %q", text)
	}
	sc := rec.Result.Structured.(map[string]any)
	if sc["password"] != Masked || sc["list"].([]any)[0].(map[string]any)["Api-Key"] != Masked {
		t.Errorf("structured content: %v", sc)
	}
	if len(sunk) != 1 || sunk[0] != rec {
		t.Fatalf("recorder got %d records", len(sunk))
	}
	if rec.ID == "" || rec.Started.IsZero() || rec.Ended.Before(rec.Started) {
		t.Errorf("id/timing: %+v", rec)
	}
}

func TestRecordSurvivesPanicsAndNilRecords(t *testing.T) {
	red, _ := newRedactor(RedactOptions{})
	var n int
	sink := RecorderFunc(func(context.Context, *tool.Record) { n++ })
	for name, next := range map[string]Handler{
		"panic": HandlerFunc(func(context.Context, tool.Call) *tool.Record { panic("boom") }),
		"nil":   HandlerFunc(func(context.Context, tool.Call) *tool.Record { return nil }),
	} {
		rec := Chain(next, newRecord(red, sink, slog.New(slog.DiscardHandler), Limits{}.withDefaults()).middleware).Call(context.Background(), tool.Call{Server: "s", Tool: "t"})
		if tool.KindOf(rec.Err()) != tool.KindExecutionFailed || rec.Server != "s" || rec.ID == "" {
			t.Errorf("%s: %+v", name, rec.Error)
		}
	}
	if n != 2 {
		t.Errorf("recorded %d, want 2", n)
	}
}

func TestRedactorRejectsBadPattern(t *testing.T) {
	if _, err := newRedactor(RedactOptions{Patterns: []string{"("}}); err == nil {
		t.Fatal("bad pattern accepted")
	}
}

// The redactor copies only what it masks and never writes into the value
// it was given: the caller's maps and slices may be shared with the tool.
func TestRedactorCopiesOnlyWhatItMasks(t *testing.T) {
	red, err := newRedactor(RedactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clean := map[string]any{"q": "weather", "list": []any{"a", 1.0, map[string]any{"b": true}}}
	out, changed := red.value(clean)
	if changed {
		t.Fatalf("nothing secret, but reported a change: %v", out)
	}
	if reflect.ValueOf(out).UnsafePointer() != reflect.ValueOf(clean).UnsafePointer() {
		t.Fatal("a value with nothing to mask was copied")
	}
	inner := map[string]any{"token": "t0ps3cret", "keep": "x"}
	list := []any{"plain", inner}
	dirty := map[string]any{"list": list, "other": map[string]any{"n": 1.0}, "password": Masked}
	out, changed = red.value(dirty)
	if !changed {
		t.Fatal("a secret key went unmasked")
	}
	m := out.(map[string]any)
	if got := m["list"].([]any)[1].(map[string]any); got["token"] != Masked || got["keep"] != "x" {
		t.Errorf("masked copy: %v", got)
	}
	if inner["token"] != "t0ps3cret" || list[1].(map[string]any)["token"] != "t0ps3cret" || dirty["list"].([]any)[1].(map[string]any)["token"] != "t0ps3cret" {
		t.Error("the input was modified")
	}
	if m["password"] != Masked {
		t.Errorf("already masked value: %v", m["password"])
	}
}

// Masking a record copies no part of it that holds nothing secret: a
// clean result is the very result the tool returned, clean notes the same
// slice. A part with a secret is masked in a copy, and the result, error
// and notes the record pointed to (which a source may share between
// calls) are left as they were.
func TestRedactorMasksARecordWithoutCopyingCleanParts(t *testing.T) {
	red, err := newRedactor(RedactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shared := tool.TextResult("sunny, 21°C")
	notes := []tool.Note{{Layer: "repair", Message: "renamed q", Data: map[string]any{"from": "Q"}}}
	rec := &tool.Record{Arguments: map[string]any{"q": "weather"}, Result: shared, Notes: notes}
	if out := red.record(rec); out != rec || out.Result != shared || &out.Notes[0] != &notes[0] {
		t.Error("a record with nothing secret was copied")
	}

	secret := "bEARER abcdefghijklmnop" // any case, as the pattern says
	shared = &tool.Result{Content: []tool.Content{{Type: tool.ContentText, Text: "ok"}, {Type: tool.ContentText, Text: secret}}}
	errShared := &tool.Error{Kind: tool.KindToolError, Message: "failed with " + secret}
	notes = []tool.Note{{Layer: "a", Message: "clean"}, {Layer: "b", Message: secret}}
	rec = &tool.Record{Result: shared, Error: errShared, Notes: notes}
	out := red.record(rec)
	if out.Result == shared || out.Result.Content[1].Text != Masked || out.Result.Content[0].Text != "ok" {
		t.Errorf("masked result: %+v", out.Result)
	}
	if out.Error == errShared || strings.Contains(out.Error.Message, "abcdefgh") {
		t.Errorf("masked error: %+v", out.Error)
	}
	if out.Notes[1].Message != Masked || out.Notes[0].Message != "clean" {
		t.Errorf("masked notes: %+v", out.Notes)
	}
	if shared.Content[1].Text != secret || errShared.Message != "failed with "+secret || notes[1].Message != secret {
		t.Error("what the record pointed to was modified")
	}
}
