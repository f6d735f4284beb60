package pipeline

import (
	"strings"
	"testing"

	"github.com/toolmux/toolmux/tool"
)

func TestFormat(t *testing.T) {
	ok := &tool.Record{Server: "s", Tool: "t", Result: &tool.Result{Content: []tool.Content{
		{Type: tool.ContentText, Text: "hello"}, {Type: tool.ContentImage, Data: []byte{1}, MIMEType: "image/png"},
	}}, Instructions: []string{"Use it wisely."}}
	parts := Format(ok)
	if len(parts) != 3 || parts[0].Text != "hello" || parts[1].Type != tool.ContentImage || parts[2].Text != "Use it wisely." {
		t.Errorf("success: %+v", parts)
	}
	if txt := FormatText(ok); !strings.Contains(txt, "hello") || !strings.Contains(txt, "[image image/png, 1 bytes]") {
		t.Errorf("text: %q", txt)
	}

	failed := &tool.Record{Server: "fs", Tool: "read_fil", Error: &tool.Error{Kind: tool.KindToolNotRegistered, Message: `no tool named "read_fil"`, Suggestion: "read_file"}}
	s := FormatText(failed)
	for _, want := range []string{"fs/read_fil", "tool_not_registered", `Did you mean "read_file"?`, "What to do:"} {
		if !strings.Contains(s, want) {
			t.Errorf("error sentence %q lacks %q", s, want)
		}
	}

	// A tool error keeps the tool's own words.
	te := &tool.Record{Server: "s", Tool: "t", Result: tool.ErrorResult("disk full"), Error: &tool.Error{Kind: tool.KindToolError, Message: "disk full"}}
	if got := FormatText(te); got != "disk full" {
		t.Errorf("tool error: %q", got)
	}

	structured := &tool.Record{Server: "s", Tool: "t", Result: &tool.Result{Structured: map[string]any{"a": 1}}}
	if got := FormatText(structured); !strings.Contains(got, `"a": 1`) {
		t.Errorf("structured only: %q", got)
	}

	for k := range map[tool.Kind]bool{tool.KindTimeout: true, tool.KindPolicyViolation: true, tool.KindInvalidParams: true, tool.KindDuplicateQuery: true, tool.KindServerUnavailable: true} {
		if fixHint(k) == "" {
			t.Errorf("no hint for %s", k)
		}
	}
}
