package tool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/tool"
)

// ---- Annotations ----

func TestAnnotationDefaults(t *testing.T) {
	T, F := tool.Bool(true), tool.Bool(false)
	cases := []struct {
		name                              string
		ann                               tool.Annotations
		readOnly, idempotent, destructive bool
	}{
		{"nothing declared", tool.Annotations{}, false, false, true},
		{"read-only", tool.Annotations{ReadOnly: T}, true, true, false},
		{"read-only false", tool.Annotations{ReadOnly: F}, false, false, true},
		// Read-only wins over contradictory hints.
		{"read-only overrides destructive", tool.Annotations{ReadOnly: T, Destructive: T}, true, true, false},
		{"read-only overrides non-idempotent", tool.Annotations{ReadOnly: T, Idempotent: F}, true, true, false},
		{"declared non-destructive", tool.Annotations{Destructive: F}, false, false, false},
		{"declared destructive", tool.Annotations{Destructive: T}, false, false, true},
		{"declared idempotent", tool.Annotations{Idempotent: T}, false, true, true},
		{"declared non-idempotent", tool.Annotations{Idempotent: F}, false, false, true},
		{"idempotent and non-destructive", tool.Annotations{Idempotent: T, Destructive: F}, false, true, false},
		{"open world has no effect", tool.Annotations{OpenWorld: T}, false, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tl := tool.Tool{Server: "s", Name: "t", Annotations: c.ann}
			if got := tl.IsReadOnly(); got != c.readOnly {
				t.Errorf("IsReadOnly() = %v, want %v", got, c.readOnly)
			}
			if got := tl.IsIdempotent(); got != c.idempotent {
				t.Errorf("IsIdempotent() = %v, want %v", got, c.idempotent)
			}
			if got := tl.IsDestructive(); got != c.destructive {
				t.Errorf("IsDestructive() = %v, want %v", got, c.destructive)
			}
		})
	}
}

func TestBoolReturnsDistinctPointers(t *testing.T) {
	a, b := tool.Bool(true), tool.Bool(true)
	if a == b {
		t.Fatal("Bool returned the same pointer twice")
	}
	if !*a || *tool.Bool(false) {
		t.Fatal("Bool does not hold its value")
	}
	*a = false
	if !*b {
		t.Fatal("changing one Bool pointer changed another")
	}
}

func TestToolJSON(t *testing.T) {
	tl := tool.Tool{
		Server: "fs", Name: "read_file", Exposed: "fs__read_file",
		Annotations: tool.Annotations{ReadOnly: tool.Bool(true), Destructive: tool.Bool(false)},
	}
	b, err := json.Marshal(tl)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["server"] != "fs" || m["tool"] != "read_file" || m["name"] != "fs__read_file" {
		t.Errorf("identity fields wrong: %s", b)
	}
	ann, _ := m["annotations"].(map[string]any)
	if ann["readOnlyHint"] != true || ann["destructiveHint"] != false {
		t.Errorf("annotations wrong: %s", b)
	}
	if _, ok := ann["idempotentHint"]; ok {
		t.Errorf("undeclared idempotentHint must be omitted (nil means not declared): %s", b)
	}
	// Undeclared annotations vanish entirely, so "not declared" survives a round trip.
	b, _ = json.Marshal(tool.Tool{Server: "fs", Name: "x"})
	if bytes.Contains(b, []byte("annotations")) {
		t.Errorf("empty annotations should be omitted: %s", b)
	}
	var back tool.Tool
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Annotations.Destructive != nil || !back.IsDestructive() {
		t.Errorf("round trip lost the undeclared state: %+v", back.Annotations)
	}
}

// ---- Result ----

func TestResultTextJoinsTextAndEmbeddedTextResources(t *testing.T) {
	r := &tool.Result{Content: []tool.Content{
		{Type: tool.ContentText, Text: "first"},
		{Type: tool.ContentImage, Data: []byte{1, 2, 3}, MIMEType: "image/png"},
		{Type: tool.ContentResource, Resource: &tool.ResourceContents{URI: "file:///a.txt", Text: "resource text"}},
		{Type: tool.ContentAudio, Data: []byte{4}, MIMEType: "audio/wav"},
		{Type: tool.ContentResourceLink, URI: "file:///b", Name: "b"},
		{Type: "something_new", Text: "ignored"},
		{Type: tool.ContentText, Text: "last\nline"},
	}}
	want := "first\nresource text\nlast\nline"
	if got := r.Text(); got != want {
		t.Errorf("Text() = %q, want %q", got, want)
	}
}

func TestResultTextEdgeCases(t *testing.T) {
	var nilResult *tool.Result
	if got := nilResult.Text(); got != "" {
		t.Errorf("nil Text() = %q", got)
	}
	if got := (&tool.Result{}).Text(); got != "" {
		t.Errorf("empty Text() = %q", got)
	}
	onlyBinary := &tool.Result{Content: []tool.Content{
		{Type: tool.ContentImage, Data: []byte("png")},
		{Type: tool.ContentAudio, Data: []byte("wav")},
	}}
	if got := onlyBinary.Text(); got != "" {
		t.Errorf("binary-only Text() = %q", got)
	}
	if got := tool.TextResult("hello").Text(); got != "hello" {
		t.Errorf("TextResult Text() = %q", got)
	}
}

// Bug: an embedded *binary* resource (blob, no text) is a binary part, which
// the doc comment says Text leaves out; instead it contributes an empty entry,
// so a blank line appears between the surrounding text parts.
func TestResultTextSkipsBlobResources(t *testing.T) {
	r := &tool.Result{Content: []tool.Content{
		{Type: tool.ContentText, Text: "a"},
		{Type: tool.ContentResource, Resource: &tool.ResourceContents{URI: "file:///x.bin", MIMEType: "application/octet-stream", Blob: []byte{0, 1}}},
		{Type: tool.ContentText, Text: "b"},
	}}
	if got, want := r.Text(), "a\nb"; got != want {
		t.Errorf("Text() = %q, want %q", got, want)
	}
	trailing := &tool.Result{Content: []tool.Content{
		{Type: tool.ContentText, Text: "a"},
		{Type: tool.ContentResource},
	}}
	if got, want := trailing.Text(), "a"; got != want {
		t.Errorf("Text() = %q, want %q", got, want)
	}
}

func TestResultSummaryDescribesEveryPart(t *testing.T) {
	r := &tool.Result{Content: []tool.Content{
		{Type: tool.ContentText, Text: "hello"},
		{Type: tool.ContentImage, Data: []byte{1, 2, 3}, MIMEType: "image/png"},
		{Type: tool.ContentAudio, Data: []byte{1, 2}, MIMEType: "audio/wav"},
		{Type: tool.ContentResource},
		{Type: tool.ContentResource, Resource: &tool.ResourceContents{URI: "file:///a.txt", Text: "body"}},
		{Type: tool.ContentResource, Resource: &tool.ResourceContents{URI: "file:///b.bin", MIMEType: "application/octet-stream", Blob: []byte{9, 9, 9, 9}}},
		{Type: tool.ContentResourceLink, URI: "file:///c.txt", Name: "c.txt"},
		{Type: "widget"},
	}}
	want := strings.Join([]string{
		"hello",
		"[image image/png, 3 bytes]",
		"[audio audio/wav, 2 bytes]",
		"[resource]",
		"[resource file:///a.txt]\nbody",
		"[resource file:///b.bin application/octet-stream, 4 bytes]",
		"[resource link file:///c.txt c.txt]",
		"[widget]",
	}, "\n")
	if got := r.Summary(); got != want {
		t.Errorf("Summary() =\n%s\nwant\n%s", got, want)
	}
	var nilResult *tool.Result
	if got := nilResult.Summary(); got != "" {
		t.Errorf("nil Summary() = %q", got)
	}
}

func TestTextAndErrorResult(t *testing.T) {
	r := tool.TextResult("ok")
	if r.IsError || len(r.Content) != 1 || r.Content[0].Type != tool.ContentText || r.Content[0].Text != "ok" {
		t.Errorf("TextResult = %+v", r)
	}
	e := tool.ErrorResult("boom")
	if !e.IsError || len(e.Content) != 1 || e.Content[0].Type != tool.ContentText || e.Content[0].Text != "boom" {
		t.Errorf("ErrorResult = %+v", e)
	}
}

func representativeResult() *tool.Result {
	size := int64(1234)
	return &tool.Result{
		Content: []tool.Content{
			{Type: tool.ContentText, Text: "hello", Annotations: &tool.ContentAnnotations{Audience: []string{"user", "assistant"}, Priority: 0.5, LastModified: "2025-01-02T03:04:05Z"}},
			{Type: tool.ContentImage, Data: []byte{0x89, 'P', 'N', 'G', 0, 0xff}, MIMEType: "image/png"},
			{Type: tool.ContentAudio, Data: []byte("RIFF"), MIMEType: "audio/wav"},
			{Type: tool.ContentResource, Resource: &tool.ResourceContents{URI: "file:///a.txt", MIMEType: "text/plain", Text: "resource text"}},
			{Type: tool.ContentResource, Resource: &tool.ResourceContents{URI: "file:///b.bin", MIMEType: "application/octet-stream", Blob: []byte{0, 1, 2, 250}}},
			{Type: tool.ContentResourceLink, URI: "file:///c.txt", Name: "c.txt", Title: "C", Description: "a file", MIMEType: "text/plain", Size: &size},
		},
		Structured: map[string]any{"count": 3.0, "items": []any{"a", "b"}},
		IsError:    true,
		Meta:       map[string]any{"trace": "xyz"},
	}
}

func TestResultJSONIsMCPWireFormat(t *testing.T) {
	b, err := json.Marshal(representativeResult())
	if err != nil {
		t.Fatal(err)
	}
	want := `{
	  "content": [
	    {"type": "text", "text": "hello", "annotations": {"audience": ["user", "assistant"], "lastModified": "2025-01-02T03:04:05Z", "priority": 0.5}},
	    {"type": "image", "data": "iVBORwD/", "mimeType": "image/png"},
	    {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
	    {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "resource text"}},
	    {"type": "resource", "resource": {"uri": "file:///b.bin", "mimeType": "application/octet-stream", "blob": "AAEC+g=="}},
	    {"type": "resource_link", "uri": "file:///c.txt", "name": "c.txt", "title": "C", "description": "a file", "mimeType": "text/plain", "size": 1234}
	  ],
	  "structuredContent": {"count": 3, "items": ["a", "b"]},
	  "isError": true,
	  "_meta": {"trace": "xyz"}
	}`
	var got, exp any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &exp); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("JSON =\n%s\nwant\n%s", b, want)
	}
}

func TestResultJSONRoundTrip(t *testing.T) {
	orig := representativeResult()
	b, err := json.Marshal(orig)
	if err != nil {
		t.Fatal(err)
	}
	var back tool.Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, orig) {
		t.Errorf("round trip changed the result:\n got %#v\nwant %#v", &back, orig)
	}
	if back.Text() != orig.Text() || back.Summary() != orig.Summary() {
		t.Error("round trip changed Text or Summary")
	}
}

func TestResultJSONOmitsEmptyOptionalFields(t *testing.T) {
	b, err := json.Marshal(tool.TextResult("x"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"content":[{"type":"text","text":"x"}]}`; got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
}

// Bug: MCP's TextContent requires "text" (the go-sdk always writes it, even
// when empty), but Content.Text is omitempty, so an empty text part is written
// as {"type":"text"}, which is not MCP's wire form.
func TestEmptyTextPartKeepsTextField(t *testing.T) {
	b, err := json.Marshal(tool.Content{Type: tool.ContentText})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"type":"text","text":""}`; got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
}

// ---- Error ----

func TestErrorString(t *testing.T) {
	e := &tool.Error{
		Kind: tool.KindToolNotRegistered, Message: `no tool named "raed"`,
		Server: "fs", Tool: "raed", Suggestion: "fs__read_file", Detail: "stderr tail",
	}
	got := e.Error()
	for _, part := range []string{"tool_not_registered", `no tool named "raed"`, "fs__read_file", "stderr tail"} {
		if !strings.Contains(got, part) {
			t.Errorf("Error() = %q does not contain %q", got, part)
		}
	}
	if want := "tool_not_registered: no tool named \"raed\" (did you mean fs__read_file?)\nstderr tail"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	plain := tool.NewError(tool.KindTimeout, "took too long")
	if got, want := plain.Error(), "timeout: took too long"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if strings.Contains(plain.Error(), "did you mean") {
		t.Error("no suggestion, but Error() offers one")
	}
}

func TestNewError(t *testing.T) {
	e := tool.NewError(tool.KindPolicyViolation, "denied")
	if e.Kind != tool.KindPolicyViolation || e.Message != "denied" || e.Err != nil {
		t.Errorf("NewError = %+v", e)
	}
}

func TestErrorsAsThroughWrapping(t *testing.T) {
	inner := &tool.Error{Kind: tool.KindServerUnavailable, Message: "down"}
	wrapped := []error{
		inner,
		fmt.Errorf("calling: %w", inner),
		fmt.Errorf("outer: %w", fmt.Errorf("middle: %w", inner)),
		errors.Join(errors.New("other"), inner),
		fmt.Errorf("outer: %w", errors.Join(errors.New("other"), inner)),
	}
	for i, err := range wrapped {
		var te *tool.Error
		if !errors.As(err, &te) {
			t.Errorf("%d: errors.As failed for %v", i, err)
			continue
		}
		if te != inner {
			t.Errorf("%d: errors.As found %p, want %p", i, te, inner)
		}
		if k := tool.KindOf(err); k != tool.KindServerUnavailable {
			t.Errorf("%d: KindOf = %q", i, k)
		}
	}
}

func TestErrorsIsMatchesByKind(t *testing.T) {
	e := &tool.Error{Kind: tool.KindTimeout, Message: "slow", Server: "s", Tool: "t"}
	for _, err := range []error{e, fmt.Errorf("w: %w", e), errors.Join(errors.New("x"), e)} {
		if !errors.Is(err, &tool.Error{Kind: tool.KindTimeout}) {
			t.Errorf("errors.Is(%v, kind timeout) = false", err)
		}
		if errors.Is(err, &tool.Error{Kind: tool.KindCancelled}) {
			t.Errorf("errors.Is(%v, kind cancelled) = true", err)
		}
		// A target with a message is a specific error, not a kind pattern.
		if errors.Is(err, &tool.Error{Kind: tool.KindTimeout, Message: "other"}) {
			t.Errorf("errors.Is matched a target with a different message")
		}
		if errors.Is(err, &tool.Error{Kind: tool.KindTimeout, Err: errors.New("x")}) {
			t.Errorf("errors.Is matched a target with a cause")
		}
		if !errors.Is(err, e) {
			t.Errorf("errors.Is(err, itself) = false")
		}
	}
	if errors.Is(errors.New("plain"), &tool.Error{Kind: tool.KindExecutionFailed}) {
		t.Error("a plain error matched an *Error kind")
	}
}

func TestErrorUnwrap(t *testing.T) {
	cause := errors.New("root cause")
	e := &tool.Error{Kind: tool.KindExecutionFailed, Message: "m", Err: cause}
	if e.Unwrap() != cause {
		t.Error("Unwrap did not return the cause")
	}
	if !errors.Is(e, cause) || !errors.Is(fmt.Errorf("x: %w", e), cause) {
		t.Error("errors.Is does not reach the cause")
	}
	if (&tool.Error{}).Unwrap() != nil {
		t.Error("Unwrap of an error with no cause is not nil")
	}
}

type customErr struct{}

func (customErr) Error() string { return "custom" }

func TestKindOf(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want tool.Kind
	}{
		{"nil", nil, ""},
		{"*Error", tool.NewError(tool.KindInvalidParams, "bad"), tool.KindInvalidParams},
		{"wrapped *Error", fmt.Errorf("x: %w", tool.NewError(tool.KindFileNotFound, "nope")), tool.KindFileNotFound},
		{"*Error wrapping a context error keeps its own kind", &tool.Error{Kind: tool.KindServerUnavailable, Err: context.Canceled}, tool.KindServerUnavailable},
		{"context.Canceled", context.Canceled, tool.KindCancelled},
		{"context.DeadlineExceeded", context.DeadlineExceeded, tool.KindTimeout},
		{"wrapped Canceled", fmt.Errorf("call: %w", context.Canceled), tool.KindCancelled},
		{"wrapped DeadlineExceeded", fmt.Errorf("call: %w", context.DeadlineExceeded), tool.KindTimeout},
		{"joined DeadlineExceeded", errors.Join(errors.New("x"), context.DeadlineExceeded), tool.KindTimeout},
		// Errors of other types have no kind (the convention of every
		// KindOf in toolmux, see internal/errkind); AsError classifies
		// them as execution failures.
		{"plain", errors.New("boom"), ""},
		{"custom type", customErr{}, ""},
		{"wrapped plain", fmt.Errorf("x: %w", errors.New("boom")), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := tool.KindOf(c.err); got != c.want {
				t.Errorf("KindOf = %q, want %q", got, c.want)
			}
			if c.err == nil {
				return
			}
			want := c.want
			if want == "" {
				want = tool.KindExecutionFailed
			}
			if got := tool.AsError(c.err).Kind; got != want {
				t.Errorf("AsError(...).Kind = %q, want %q", got, want)
			}
		})
	}
}

func TestKindOfRealContextErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if k := tool.KindOf(ctx.Err()); k != tool.KindCancelled {
		t.Errorf("cancelled context: %q", k)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ctx.Done()
	if k := tool.KindOf(ctx.Err()); k != tool.KindTimeout {
		t.Errorf("expired context: %q", k)
	}
}

func TestAsError(t *testing.T) {
	if tool.AsError(nil) != nil {
		t.Error("AsError(nil) != nil")
	}

	te := tool.NewError(tool.KindPolicyViolation, "no")
	if tool.AsError(te) != te {
		t.Error("AsError(*Error) did not return it unchanged")
	}
	if tool.AsError(fmt.Errorf("wrap: %w", te)) != te {
		t.Error("AsError(wrapped *Error) did not return the inner error")
	}

	plain := errors.New("boom")
	a := tool.AsError(plain)
	if a.Kind != tool.KindExecutionFailed || a.Message != "boom" || a.Err != plain {
		t.Errorf("AsError(plain) = %+v", a)
	}
	if !errors.Is(a, plain) {
		t.Error("AsError(plain) lost the cause")
	}
	// Idempotent: converting twice yields the same pointer.
	if tool.AsError(a) != a {
		t.Error("AsError is not idempotent")
	}

	wrappedCancel := fmt.Errorf("call: %w", context.Canceled)
	c := tool.AsError(wrappedCancel)
	if c.Kind != tool.KindCancelled || c.Message != "call: context canceled" || !errors.Is(c, context.Canceled) {
		t.Errorf("AsError(wrapped Canceled) = %+v", c)
	}
	d := tool.AsError(context.DeadlineExceeded)
	if d.Kind != tool.KindTimeout || !errors.Is(d, context.DeadlineExceeded) {
		t.Errorf("AsError(DeadlineExceeded) = %+v", d)
	}
}

func TestErrNotSent(t *testing.T) {
	cause := errors.New("exec: not found")
	e := &tool.Error{Kind: tool.KindServerUnavailable, Message: "could not start", Err: errors.Join(tool.ErrNotSent, cause)}
	for _, err := range []error{e, fmt.Errorf("attempt 1: %w", e), errors.Join(errors.New("x"), e)} {
		if !errors.Is(err, tool.ErrNotSent) {
			t.Errorf("ErrNotSent not found in %v", err)
		}
		if !errors.Is(err, cause) {
			t.Errorf("cause not found in %v", err)
		}
		if tool.KindOf(err) != tool.KindServerUnavailable {
			t.Errorf("KindOf = %q", tool.KindOf(err))
		}
	}
	sent := &tool.Error{Kind: tool.KindServerUnavailable, Message: "crashed mid-call", Err: cause}
	if errors.Is(sent, tool.ErrNotSent) {
		t.Error("ErrNotSent found in an error that does not carry it")
	}
}

func TestErrorJSON(t *testing.T) {
	e := &tool.Error{Kind: tool.KindToolNotRegistered, Message: "m", Suggestion: "s__t", Err: errors.New("hidden")}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"kind":"tool_not_registered","message":"m","suggestion":"s__t"}`; got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
}

// ---- Progress ----

func TestProgressRoundTrip(t *testing.T) {
	if fn := tool.ProgressFrom(context.Background()); fn != nil {
		t.Error("ProgressFrom of a bare context is not nil")
	}
	var got []tool.Progress
	ctx := tool.WithProgress(context.Background(), func(p tool.Progress) { got = append(got, p) })
	// Derived contexts still carry the callback.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fn := tool.ProgressFrom(ctx)
	if fn == nil {
		t.Fatal("ProgressFrom returned nil after WithProgress")
	}
	fn(tool.Progress{Progress: 1, Total: 10, Message: "one"})
	fn(tool.Progress{Progress: 2, Total: 10, Message: "two"})
	want := []tool.Progress{{Progress: 1, Total: 10, Message: "one"}, {Progress: 2, Total: 10, Message: "two"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("callback got %+v, want %+v", got, want)
	}
	if fn := tool.ProgressFrom(tool.WithProgress(context.Background(), nil)); fn != nil {
		t.Error("WithProgress(nil) should yield a nil callback")
	}
	// The innermost WithProgress wins.
	var which string
	outer := tool.WithProgress(context.Background(), func(tool.Progress) { which = "outer" })
	inner := tool.WithProgress(outer, func(tool.Progress) { which = "inner" })
	tool.ProgressFrom(inner)(tool.Progress{})
	if which != "inner" {
		t.Errorf("innermost callback not used: %q", which)
	}
}

func TestProgressJSON(t *testing.T) {
	b, _ := json.Marshal(tool.Progress{Progress: 0.5})
	if got, want := string(b), `{"progress":0.5}`; got != want {
		t.Errorf("JSON = %s, want %s", got, want)
	}
}
