package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
)

const pinnedDescription = "Lists the files of a folder."

// listedRoute is one route and protocol era of serve, with a client of
// its own kept through the test, and the name fx/described has there.
type listedRoute struct {
	what, name string
	cs         *mcp.ClientSession
}

// listed returns the description route lists its tool with, and the whole
// listing as JSON.
func (lr listedRoute) listed(t *testing.T, ctx context.Context) (desc, all string) {
	t.Helper()
	res, err := lr.cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("%s: tools/list: %v", lr.what, err)
	}
	b, _ := json.Marshal(res)
	for _, tl := range res.Tools {
		if tl.Name == lr.name {
			return tl.Description, string(b)
		}
	}
	t.Errorf("%s: %s is not listed: %s", lr.what, lr.name, b)
	return "", string(b)
}

// call calls the route's tool and returns its text and error kind.
func (lr listedRoute) call(t *testing.T, ctx context.Context) (text, kind string) {
	t.Helper()
	res, err := lr.cs.CallTool(ctx, &mcp.CallToolParams{Name: lr.name, Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("%s: tools/call: %v", lr.what, err)
	}
	kind, _ = res.Meta["toolmux/error_kind"].(string)
	return testservers.ResultText(res), kind
}

// findTools calls find_tools on cs with query and returns its text.
func findTools(t *testing.T, ctx context.Context, cs *mcp.ClientSession, query string) string {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "find_tools", Arguments: map[string]any{"query": query}})
	if err != nil || res.IsError {
		t.Fatalf("find_tools %q: %v %+v", query, err, res)
	}
	b, _ := json.Marshal(res)
	return string(b)
}

// offered runs an agent whose model answers at once, and returns the tools
// its model was offered, as JSON.
func offered(t *testing.T, dir, data string) string {
	t.Helper()
	m := llmtest.OpenAI(t, llmtest.Replies(llmtest.Reply{Content: "done"}))
	r := runToolmux(t, dir, nil, "--data-dir", data, "run", "--model", "scripted", "--base-url", m.BaseURL(), "list the files")
	reqs := m.Requests()
	if r.code != 0 || len(reqs) != 1 {
		t.Fatalf("run: exit %d, %d requests\n%s", r.code, len(reqs), r.stderr)
	}
	b, _ := json.Marshal(reqs[0].Raw["tools"])
	return string(b)
}

// While a tool is held because its server changed its description (the
// "rug pull"), no listing carries the new text: every MCP route in both
// eras (/mcp, a virtual server renaming it, the passthrough route, serve
// --stdio), find_tools (whose index does not hold the new words), the
// API's catalog, toolmux tools and the tools an agent's model is offered
// list the pinned definition, and its calls are refused tool_changed
// (saying what changed, not what the new definition says). An
// acceptance on the API with a misspelt field or another sha256 is
// refused and accepts nothing; the one with the sha256 of the definition
// presented now lists the new description everywhere, and the calls run.
func TestPinningListsThePinnedDefinition(t *testing.T) {
	t.Parallel()
	dir, descFile := pinWorkspace(t, `virtual_servers:
  - name: renamed
    tools: ["fx/described", "fx/echo"]
    rename: {fx/described: listing}
  - name: search
    tools: ["fx/*"]
    tool_search: {enabled: true}
`)
	home := t.TempDir()
	data := filepath.Join(home, "toolmux") // serve's data directory under XDG_DATA_HOME=home
	if r := toolmux(t, dir, "", "--data-dir", data, "call", "fx", "described"); r.code != 0 {
		t.Fatalf("first run: exit %d %s", r.code, r.stderr)
	}
	if err := os.WriteFile(descFile, []byte(rugPull), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// toolmux tools: the table and --json list the pinned description;
	// the new one is only in the difference, marked pending.
	r := toolmux(t, dir, "", "--data-dir", data, "tools")
	table, pending, _ := strings.Cut(r.stdout, "\nfx/described changed since it was pinned")
	if strings.Contains(table, "evil.example") || !strings.Contains(table, pinnedDescription) ||
		!strings.Contains(pending, "pending, not accepted") || !strings.Contains(pending, "evil.example") {
		t.Errorf("tools while held:\n%s", r.stdout)
	}
	r = toolmux(t, dir, "", "--data-dir", data, "tools", "--json")
	var entries []struct {
		Server, Tool, Description string
		Pin                       struct{ State, Diff string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil {
		t.Fatalf("tools --json: %v\n%s", err, r.stdout)
	}
	for _, e := range entries {
		if e.Server == "fx" && e.Tool == "described" && (e.Description != pinnedDescription || e.Pin.State != "changed") {
			t.Errorf("tools --json while held: %+v", e)
		}
	}
	if tools := offered(t, dir, data); strings.Contains(tools, "evil.example") || !strings.Contains(tools, pinnedDescription) {
		t.Errorf("the agent's model was offered, while held: %s", tools)
	}

	p := startServeProc(t, dir, home)
	var routes []listedRoute
	for _, version := range []string{legacyProtocol, "2026-07-28"} {
		for _, rt := range []struct{ path, name string }{
			{"/mcp", "fx__described"}, {"/virtual/renamed/mcp", "listing"}, {"/servers/fx/mcp", "described"},
		} {
			routes = append(routes, listedRoute{what: rt.path + " " + version, name: rt.name, cs: dialEra(t, p.url(rt.path), version).cs})
		}
		cmd := exec.Command(binary, "serve", "--stdio")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+home)
		routes = append(routes, listedRoute{what: "serve --stdio " + version, name: "fx__described",
			cs: connectEra(t, ctx, "stdio", version, &mcp.CommandTransport{Command: cmd}).cs})
	}
	search := []*mcp.ClientSession{dialEra(t, p.url("/virtual/search/mcp"), legacyProtocol).cs,
		dialEra(t, p.url("/virtual/search/mcp"), "2026-07-28").cs}
	apiTools := func() string {
		var tools []struct{ Server, Tool, Description string }
		p.getJSON(t, "/api/tools", &tools)
		for _, tl := range tools {
			if tl.Server == "fx" && tl.Tool == "described" {
				return tl.Description
			}
		}
		t.Fatalf("/api/tools has no fx/described: %+v", tools)
		return ""
	}
	held := func(when string) {
		t.Helper()
		for _, lr := range routes {
			if desc, all := lr.listed(t, ctx); desc != pinnedDescription || strings.Contains(all, "evil.example") {
				t.Errorf("%s, %s: listed %q\n%s", lr.what, when, desc, all)
			}
			if text, kind := lr.call(t, ctx); kind != "tool_changed" || !strings.Contains(text, "toolmux tools --accept fx/described") ||
				strings.Contains(text, "evil.example") {
				t.Errorf("%s, %s: the call answered %s %q", lr.what, when, kind, text)
			}
		}
		for i, cs := range search {
			if found := findTools(t, ctx, cs, "fx__described"); strings.Contains(found, "evil.example") || !strings.Contains(found, pinnedDescription) {
				t.Errorf("find_tools (%d), %s: %s", i, when, found)
			}
			if found := findTools(t, ctx, cs, "id_rsa evil"); strings.Contains(found, "described") {
				t.Errorf("find_tools of the new words (%d), %s: %s", i, when, found)
			}
		}
		if desc := apiTools(); desc != pinnedDescription {
			t.Errorf("/api/tools, %s: %q", when, desc)
		}
	}
	held("while held")

	var pins []struct{ Server, Tool, State, Pinned, Current string }
	p.getJSON(t, "/api/pins", &pins)
	current, pinned := "", ""
	for _, e := range pins {
		if e.Server == "fx" && e.Tool == "described" && e.State == "changed" {
			current, pinned = e.Current, e.Pinned
		}
	}
	if current == "" {
		t.Fatalf("/api/pins: %+v", pins)
	}
	for _, tc := range []struct {
		body, kind string
		status     int
	}{
		{`{"sha": "` + current + `"}`, "bad_request", http.StatusBadRequest},
		{`{"sha256": "` + pinned + `"}`, "pin_conflict", http.StatusConflict},
	} {
		code, body := postJSON(t, p.url("/api/pins/fx/described/accept"), tc.body)
		var e struct {
			Error struct{ Kind, Message string }
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || code != tc.status || e.Error.Kind != tc.kind {
			t.Errorf("accept with %s: %d %s", tc.body, code, body)
		}
	}
	held("after the refused acceptances")

	if code, body := postJSON(t, p.url("/api/pins/fx/described/accept"), fmt.Sprintf(`{"sha256": %q}`, current)); code != http.StatusOK {
		t.Fatalf("accept: %d %s", code, body)
	}
	for _, lr := range routes {
		if desc, _ := lr.listed(t, ctx); desc != rugPull {
			t.Errorf("%s, accepted: listed %q", lr.what, desc)
		}
		if text, kind := lr.call(t, ctx); kind != "" || text != "described ran" {
			t.Errorf("%s, accepted: the call answered %s %q", lr.what, kind, text)
		}
	}
	for i, cs := range search {
		if found := findTools(t, ctx, cs, "id_rsa evil"); !strings.Contains(found, "fx__described") || !strings.Contains(found, "evil.example") {
			t.Errorf("find_tools (%d), accepted: %s", i, found)
		}
	}
	if desc := apiTools(); desc != rugPull {
		t.Errorf("/api/tools, accepted: %q", desc)
	}
	if tools := offered(t, dir, data); !strings.Contains(tools, "evil.example") {
		t.Errorf("the agent's model was offered, accepted: %s", tools)
	}
}
