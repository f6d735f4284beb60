package config_test

import (
	"reflect"
	"testing"

	"github.com/toolmux/toolmux/config"
)

func TestToolSearchAndVirtualServers(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`tool_search:
  enabled: true
  above: 200
  pinned: [github/create_issue, "fs/read_*"]
  limit: 20
virtual_servers:
  - name: support
    description: Tickets and chat.
    tools: ["github/*_issue", slack/post_message]
    rename: {github/create_issue: open_ticket}
    descriptions: {slack/post_message: Post to the support channel.}
    tool_search: {above: 50}
  - name: read-only
    tools: ["*/read_*"]
`), config.Options{Dir: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (config.ToolSearch{Enabled: true, Above: 200, Pinned: []string{"github/create_issue", "fs/read_*"}, Limit: 20}); !reflect.DeepEqual(cfg.ToolSearch, want) {
		t.Errorf("tool_search: %+v", cfg.ToolSearch)
	}
	want := []config.VirtualServer{
		{Name: "support", Description: "Tickets and chat.", Tools: []string{"github/*_issue", "slack/post_message"},
			Rename:       map[string]string{"github/create_issue": "open_ticket"},
			Descriptions: map[string]string{"slack/post_message": "Post to the support channel."},
			ToolSearch:   config.ToolSearch{Above: 50}},
		{Name: "read-only", Tools: []string{"*/read_*"}},
	}
	if !reflect.DeepEqual(cfg.VirtualServers, want) {
		t.Errorf("virtual_servers: %+v", cfg.VirtualServers)
	}
	// Neither section: nothing changes.
	cfg, err = config.ParseWith("toolmux.yaml", []byte("workspace: .\n"), config.Options{Dir: "/work"})
	if err != nil || !reflect.DeepEqual(cfg.ToolSearch, config.ToolSearch{}) || cfg.VirtualServers != nil {
		t.Errorf("without the sections: %v %+v %+v", err, cfg.ToolSearch, cfg.VirtualServers)
	}
}

func TestToolSearchAndVirtualServersErrors(t *testing.T) {
	checkErrors(t, "toolmux.yaml", `tool_search:
  enabled: yes please
  abov: 3
  limit: 51
  pinned: ["a/[b"]
virtual_servers:
  - name: "bad name"
    tools: []
  - name: ok
    tools: [gh/*]
    rename:
      gh/a: find_tools
      gh/b: x
      gh/c: x
      other/d: y
      gh/*: z
      nope: w
      gh/e: "has space"
    descriptions:
      gh/a: ""
  - name: ok
    tools: [x/y]
  - description: no name or tools
`, []wantErr{
		{2, 12, "tool_search.enabled", `expected true or false, got "yes please"`},
		{3, 3, "tool_search.abov", "unknown key (expected one of: enabled, above, pinned, limit); did you mean above?"},
		{4, 10, "tool_search.limit", "must be between 1 and 50, got 51"},
		{5, 12, "tool_search.pinned[0]", ""},
		{7, 11, "virtual_servers[0].name", `"bad name" is not a virtual server name: use 1 to 64 letters, digits, '-' and '_' (it is a part of the URL)`},
		{8, 12, "virtual_servers[0].tools", "must not be empty"},
		{12, 13, "virtual_servers[1].rename.gh/a", `"find_tools" is the name of one of tool search's meta-tools`},
		{14, 13, "virtual_servers[1].rename.gh/c", `"x" is already the name of "gh/b"`},
		{15, 7, "virtual_servers[1].rename.other/d", `"other/d" is not among the virtual server's tools (no pattern of tools matches it)`},
		{16, 7, "virtual_servers[1].rename.gh/*", `"gh/*" is a pattern: name one tool exactly (server/tool)`},
		{17, 7, "virtual_servers[1].rename.nope", `"nope" is not a tool: write server/tool`},
		{18, 13, "virtual_servers[1].rename.gh/e", `"has space" is not a tool name: use 1 to 128 letters, digits, '_', '-' and '.'`},
		{20, 13, "virtual_servers[1].descriptions.gh/a", "must not be empty"},
		{21, 11, "virtual_servers[2].name", `virtual server "ok" is already defined at line 9`},
		{23, 5, "virtual_servers[3]", "a virtual server needs a name"},
		{23, 5, "virtual_servers[3]", "a virtual server needs tools: the tool patterns (server/tool) of the tools it serves"},
	})
}
