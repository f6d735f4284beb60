package agent_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/agent"
)

func TestParseTextCalls(t *testing.T) {
	reply := `I will read the file first, then search.

<use_mcp_tool>
<server_name>builtin</server_name>
<tool_name>read_file</tool_name>
<arguments>
{"path": "README.md", "limit": 5}
</arguments>
</use_mcp_tool>

<USE_MCP_TOOL >
  <server_name> web </server_name>
  <tool_name>search</tool_name>
  <arguments>{'query': 'toolmux "gateway"', num: 3,}</arguments>
</use_mcp_tool>
<use_mcp_tool>
<server_name>builtin</server_name>
<tool_name>list_directory</tool_name>
</use_mcp_tool>`
	calls, before, errs := agent.ParseTextCalls(reply)
	if len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	if before != "I will read the file first, then search." {
		t.Errorf("before: %q", before)
	}
	if len(calls) != 3 {
		t.Fatalf("calls: %+v", calls)
	}
	if c := calls[0]; c.Server != "builtin" || c.Tool != "read_file" || c.Arguments["path"] != "README.md" ||
		c.Arguments["limit"] != json.Number("5") || c.Repaired || !strings.HasSuffix(c.Raw, "</use_mcp_tool>") {
		t.Errorf("call 1: %+v", c)
	}
	if c := calls[1]; c.Server != "web" || c.Tool != "search" || c.Arguments["query"] != `toolmux "gateway"` ||
		c.Arguments["num"] != json.Number("3") || !c.Repaired {
		t.Errorf("call 2: %+v", c)
	}
	if c := calls[2]; c.Tool != "list_directory" || len(c.Arguments) != 0 {
		t.Errorf("call 3 (no arguments): %+v", c)
	}
}

func TestParseTextCallsCutOff(t *testing.T) {
	calls, _, errs := agent.ParseTextCalls("<use_mcp_tool>\n<server_name>builtin</server_name>\n<tool_name>write_file\n<arguments>\n{\"path\": \"a.txt\", \"content\": \"hel")
	if len(errs) != 0 || len(calls) != 1 {
		t.Fatalf("%+v %v", calls, errs)
	}
	if c := calls[0]; c.Tool != "write_file" || c.Arguments["content"] != "hel" || !c.Repaired {
		t.Errorf("%+v", c)
	}
}

func TestParseTextCallsErrors(t *testing.T) {
	reply := `<use_mcp_tool><tool_name>x</tool_name></use_mcp_tool>
<use_mcp_tool><server_name>s</server_name></use_mcp_tool>
<use_mcp_tool><server_name>s</server_name><tool_name>t</tool_name><arguments>I think the path is README</arguments></use_mcp_tool>
<use_mcp_tool><server_name>s</server_name><tool_name>t</tool_name><arguments>[1, 2]</arguments></use_mcp_tool>
<use_mcp_tool><server_name>s</server_name><tool_name>ok</tool_name><arguments>{}</arguments></use_mcp_tool>`
	calls, _, errs := agent.ParseTextCalls(reply)
	if len(calls) != 1 || calls[0].Tool != "ok" {
		t.Errorf("calls: %+v", calls)
	}
	want := []string{"<server_name> is missing", "<tool_name> is missing", "not a JSON object", "not a JSON object"}
	if len(errs) != len(want) {
		t.Fatalf("errors: %v", errs)
	}
	for i, err := range errs {
		var te *agent.TextCallError
		if !errors.As(err, &te) || te.Index != i || !strings.Contains(te.Reason, want[i]) || te.Raw == "" {
			t.Errorf("error %d: %v", i, err)
		}
	}
}

func TestParseTextCallsNone(t *testing.T) {
	calls, before, errs := agent.ParseTextCalls("  The answer is 42.  ")
	if calls != nil || errs != nil || before != "The answer is 42." {
		t.Errorf("%v %q %v", calls, before, errs)
	}
}

func TestTextProtocolPrompt(t *testing.T) {
	p := agent.TextProtocolPrompt([]agent.TextProtocolTool{
		{Server: "web", Name: "search", Description: "Searches the web.", Schema: `{"type":"object"}`},
		{Server: "builtin", Name: "read_file", Description: "Reads a file."},
	})
	for _, want := range []string{"<use_mcp_tool>", "<server_name>SERVER</server_name>", "## Server: builtin", "### read_file", "Input schema: {\"type\":\"object\"}"} {
		if !strings.Contains(p, want) {
			t.Errorf("prompt lacks %q:\n%s", want, p)
		}
	}
	if strings.Index(p, "## Server: builtin") > strings.Index(p, "## Server: web") {
		t.Error("servers not sorted")
	}
	// The prompt's own example parses as a call.
	calls, _, errs := agent.ParseTextCalls(p)
	if len(errs) != 0 || len(calls) != 1 || calls[0].Server != "SERVER" || calls[0].Arguments["parameter"] != "value" {
		t.Errorf("the prompt's example: %+v %v", calls, errs)
	}
}

func FuzzParseTextCalls(f *testing.F) {
	f.Add("<use_mcp_tool><server_name>s</server_name><tool_name>t</tool_name><arguments>{\"a\": 1}</arguments></use_mcp_tool>")
	f.Add("text <use_mcp_tool><server_name>s<tool_name>t<arguments>{'a': [1,")
	f.Add("<use_mcp_tool></use_mcp_tool><use_mcp_tool>")
	f.Fuzz(func(t *testing.T, reply string) {
		calls, _, errs := agent.ParseTextCalls(reply)
		for _, c := range calls {
			if c.Server == "" || c.Tool == "" || c.Arguments == nil {
				t.Fatalf("call %+v from %q", c, reply)
			}
			if _, err := json.Marshal(c.Arguments); err != nil {
				t.Fatalf("arguments %v do not marshal: %v", c.Arguments, err)
			}
		}
		if n := strings.Count(strings.ToLower(reply), "<use_mcp_tool"); len(calls)+len(errs) > n {
			t.Fatalf("%d calls and %d errors from %d blocks", len(calls), len(errs), n)
		}
	})
}
