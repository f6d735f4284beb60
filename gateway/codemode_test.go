package gateway_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/codemode"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/tool"
)

// recorded keeps the records a gateway's code mode is given.
type recorded struct{ recs chan *tool.Record }

func (r recorded) Record(_ context.Context, rec *tool.Record) { r.recs <- rec }

// With tool search and code mode on, /mcp lists run_code beside the
// meta-tools of search, its description telling the model to find the
// tools it does not declare; a program calls tools that are not listed by
// name, each call reaching the Caller (the governed path), and is recorded
// itself with its code; a program past its call bound ends with the
// bound's error, the calls past it unmade.
func TestCodeModeWithToolSearch(t *testing.T) {
	rec := recorded{recs: make(chan *tool.Record, 4)}
	pin, _ := testservers.CatalogTool(0)
	c, url := catalogGateway(t, gateway.Options{ToolSearch: gateway.ToolSearch{Enabled: true, Pinned: []string{"fx/" + pin}},
		CodeMode: gateway.CodeMode{Enabled: true, Bounds: codemode.Options{MaxCalls: 3, Engine: testservers.CodeModeEngine(t)}, Recorder: rec}})
	cs := dialHTTP(t, url+"/mcp")
	if names := listNames(t, cs); !slices.Equal(names, []string{"call_tool", "find_tools", "fx__" + pin, "run_code"}) {
		t.Fatalf("/mcp lists %v", names)
	}
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range lt.Tools {
		if tl.Name == "run_code" && (!strings.Contains(tl.Description, "find others with find_tools") || !strings.Contains(tl.Description, "fx__"+pin+"(args")) {
			t.Fatalf("run_code's description:\n%s", tl.Description)
		}
	}
	a, _ := testservers.CatalogTool(500)
	b, _ := testservers.CatalogTool(501)
	code := `return [await tools.call("fx__` + a + `", {target: "x"}), await tools["fx__` + b + `"]({target: "y"})]`
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": code}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(res.StructuredContent)
	if res.IsError || !strings.Contains(string(out), a+` done for \"x\"`) || !strings.Contains(string(out), b+` done for \"y\"`) {
		t.Fatalf("run_code: %s", out)
	}
	if got := c.seen(); !slices.Equal(got, []string{"fx/" + a, "fx/" + b}) {
		t.Fatalf("the Caller saw %v", got)
	}
	r := <-rec.recs
	if r.Server != "toolmux" || r.Tool != "run_code" || r.Arguments["code"] != code || r.Error != nil || r.Task == "" {
		t.Fatalf("run_code's record: %+v", r)
	}

	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{
		"code": `for (let i = 0; i < 4; i++) await tools.call("fx__` + a + `", {target: "x"})`}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ = json.Marshal(res.StructuredContent)
	if !res.IsError || !strings.Contains(string(out), `"bound":"max_calls"`) || !strings.Contains(string(out), `"calls":3`) || len(c.seen()) != 5 {
		t.Fatalf("4 calls of 3: %s; the Caller saw %d", out, len(c.seen()))
	}
	if r := <-rec.recs; r.Error == nil || r.Error.Kind != tool.KindExecutionFailed {
		t.Fatalf("the record of a program past its bound: %+v", r)
	}
	// Without code: a clear error, nothing run.
	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{}})
	if err != nil || !res.IsError || res.Meta["toolmux/error_kind"] != "invalid_tool_params" {
		t.Fatalf("run_code without code: %v %+v", err, res)
	}
}

// Where callers see different tools, run_code's description declares
// none, and a program sees and calls only its caller's tools: a hidden
// one is answered as one that does not exist, in both eras.
func TestCodeModeByCaller(t *testing.T) {
	base := teamGatewayWith(t, gateway.ToolSearch{}, gateway.CodeMode{Enabled: true, Bounds: codemode.Options{Engine: testservers.CodeModeEngine(t)}})
	for _, era := range []string{legacyProtocol, "2026-07-28"} {
		alice := connectAs(t, base+"/mcp", "alice-token", era)
		bob := connectAs(t, base+"/mcp", "bob-token", era)
		lt, err := alice.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range lt.Tools {
			if tl.Name == "run_code" && strings.Contains(tl.Description, "up__") {
				t.Fatalf("%s: run_code's description names tools:\n%s", era, tl.Description)
			}
		}
		run := func(cs *mcp.ClientSession, code string) string {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": code}})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(res.StructuredContent)
			return string(b)
		}
		const probe = `const out = [typeof tools.up__progress, typeof tools.up__parts];
			for (const n of ["up__progress", "up__no_such_tool"]) {
				try { await tools.call(n, {}); out.push("called"); } catch (e) { out.push(e.kind, e.message.replace(n, "NAME")); }
			}
			return out;`
		got := run(alice, probe)
		var ran struct{ Result []string }
		if err := json.Unmarshal([]byte(got), &ran); err != nil {
			t.Fatalf("%s: %s: %v", era, got, err)
		}
		out := ran.Result
		if len(out) != 6 || out[0] != "undefined" || out[1] != "function" || out[2] != "tool_not_registered" || out[2] != out[4] || out[3] != out[5] {
			t.Fatalf("%s: alice's program: %q", era, out)
		}
		if got := run(bob, `return typeof tools.up__progress`); !strings.Contains(got, `"result":"function"`) {
			t.Fatalf("%s: bob's program: %s", era, got)
		}
	}
}
