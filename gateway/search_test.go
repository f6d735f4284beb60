package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
	"github.com/toolmux/toolmux/tool"
)

// countingCaller is the manager behind the gateway, noting every call that
// reaches it: what the gateway hands its Caller is what the scheduler,
// policy and pipeline see in serve.
type countingCaller struct {
	*manager.Manager
	mu    sync.Mutex
	calls []string
}

func (c *countingCaller) Call(ctx context.Context, call tool.Call) *tool.Record {
	c.mu.Lock()
	c.calls = append(c.calls, call.Server+"/"+call.Tool)
	c.mu.Unlock()
	return c.Manager.Call(ctx, call)
}

func (c *countingCaller) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// catalogGateway serves a fixture with a 1 000-tool catalog (server fx)
// through a gateway with opts, over HTTP.
func catalogGateway(t *testing.T, opts gateway.Options) (*countingCaller, string) {
	t.Helper()
	return fixtureGateway(t, opts, manager.ServerOptions{}, "-catalog", "1000")
}

// fixtureGateway serves the fixture server started with args (server fx,
// as so says) through a gateway with opts, on a real HTTP server.
func fixtureGateway(t *testing.T, opts gateway.Options, so manager.ServerOptions, args ...string) (*countingCaller, string) {
	t.Helper()
	c := &countingCaller{Manager: fixtureManager(t, so, args...)}
	g := gateway.New(c, opts)
	hs := httptest.NewServer(g.Mux("", gateway.Security{Loopback: true}))
	t.Cleanup(func() {
		hs.Close()
		g.Close()
	})
	return c, hs.URL
}

// fixtureManager is a manager of the fixture server started with args
// (server fx, as so says), closed when the test ends, after what serves
// it (cleaned up later).
func fixtureManager(t *testing.T, so manager.ServerOptions, args ...string) *manager.Manager {
	t.Helper()
	src, err := mcpsource.New(mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t), Args: args})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, so))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// dialHTTP connects a client to url in the era its client chooses.
func dialHTTP(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	return dialEra(t, url, "", &mcp.Implementation{Name: "t"}, nil)
}

// found returns the names find_tools answered.
func found(t *testing.T, res *mcp.CallToolResult) []string {
	t.Helper()
	if res.IsError {
		t.Fatalf("find_tools failed: %+v", res.Content[0])
	}
	b, _ := json.Marshal(res.StructuredContent)
	var out struct{ Tools []gateway.FoundTool }
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ft := range out.Tools {
		if ft.InputSchema == nil || ft.Server != "fx" {
			t.Errorf("found tool without schema or server: %+v", ft)
		}
		names = append(names, ft.Name)
	}
	return names
}

func listNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var names []string
	for tl, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

// With tool search on, /mcp lists the pinned tools and the two meta-tools
// out of 1 000; find_tools finds a tool by what it does and by its exact
// name, with its schema; call_tool calls it through the Caller, as does a
// direct call of the hidden name; an unknown name is an error result.
// Over HTTP (the gateway's own tools/call path), in both eras.
func TestToolSearch(t *testing.T) {
	pin, _ := testservers.CatalogTool(0)
	c, url := catalogGateway(t, gateway.Options{ToolSearch: gateway.ToolSearch{Enabled: true, Pinned: []string{"fx/" + pin}}})
	name, desc := testservers.CatalogTool(437)
	want := "fx__" + name
	inEachEra(t, func(t *testing.T, era string) {
		cs := dialEra(t, url+"/mcp", era, &mcp.Implementation{Name: "t"}, nil)
		ctx := context.Background()
		if got := listNames(t, cs); !slices.Equal(got, []string{"call_tool", "find_tools", "fx__" + pin}) {
			t.Fatalf("%s: listed %v", era, got)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "find_tools", Arguments: map[string]any{"query": desc, "limit": 5}})
		if err != nil {
			t.Fatal(err)
		}
		if names := found(t, res); len(names) != 5 || names[0] != want {
			t.Errorf("%s: find_tools %q: %v", era, desc, names)
		}
		res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "find_tools", Arguments: map[string]any{"query": "fx/" + name}})
		if err != nil {
			t.Fatal(err)
		}
		if names := found(t, res); len(names) == 0 || names[0] != want {
			t.Errorf("%s: exact name: %v", era, names)
		}
		before := len(c.seen())
		res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": want, "arguments": map[string]any{"target": "acme"}}})
		if err != nil || res.IsError {
			t.Fatalf("%s: call_tool: %v %+v", era, err, res)
		}
		if text := res.Content[0].(*mcp.TextContent).Text; text != name+` done for "acme"` {
			t.Errorf("%s: call_tool answered %q", era, text)
		}
		res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: want, Arguments: map[string]any{"target": "direct"}})
		if err != nil || res.IsError {
			t.Fatalf("%s: a direct call of a hidden tool: %v %+v", era, err, res)
		}
		if got := c.seen()[before:]; !slices.Equal(got, []string{"fx/" + name, "fx/" + name}) {
			t.Errorf("%s: the Caller saw %v", era, got)
		}
		res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": "fx__nope"}})
		if err != nil || !res.IsError || res.Meta["toolmux/error_kind"] != string(tool.KindToolNotRegistered) {
			t.Errorf("%s: call_tool of an unknown tool: %v %+v", era, err, res)
		}
		res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": want, "arguments": "x"}})
		if err != nil || !res.IsError || res.Meta["toolmux/error_kind"] != string(tool.KindInvalidParams) {
			t.Errorf("%s: call_tool with arguments not an object: %v %+v", era, err, res)
		}
		res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "find_tools", Arguments: map[string]any{"query": "zzzqqq"}})
		if err != nil || res.IsError || !strings.HasPrefix(res.Content[0].(*mcp.TextContent).Text, "No tool matches") {
			t.Errorf("%s: find_tools with no match: %v %+v", era, err, res)
		}
	})
}

// Tool search turns on by itself above a number of tools, and a catalog
// under it is listed whole (over pages), without the meta-tools, in both
// eras.
func TestToolSearchAbove(t *testing.T) {
	_, above := catalogGateway(t, gateway.Options{ToolSearch: gateway.ToolSearch{Above: 100}})
	_, under := catalogGateway(t, gateway.Options{ToolSearch: gateway.ToolSearch{Above: 5000}})
	inEachEra(t, func(t *testing.T, era string) {
		if got := listNames(t, dialEra(t, above+"/mcp", era, &mcp.Implementation{Name: "t"}, nil)); !slices.Equal(got, []string{"call_tool", "find_tools"}) {
			t.Errorf("above the threshold: %v", got)
		}
		if got := listNames(t, dialEra(t, under+"/mcp", era, &mcp.Implementation{Name: "t"}, nil)); len(got) < 1000 || slices.Contains(got, "find_tools") {
			t.Errorf("under the threshold: %d tools, find_tools listed: %v", len(got), slices.Contains(got, "find_tools"))
		}
	})
}

// With a threshold, tool search turns on when the catalog grows past it
// (a server adds a tool), and the client is told the list changed: in a
// session, by notifications/tools/list_changed on its standing stream; at
// 2026-07-28, on the subscriptions/listen stream the go-sdk's client opens
// for its ToolListChangedHandler.
func TestToolSearchTurnsOnWhenTheCatalogGrows(t *testing.T) {
	inEachEra(t, func(t *testing.T, era string) {
		m := fixtureManager(t, manager.ServerOptions{})
		ctx := context.Background()
		cat, err := m.Tools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		g := gateway.New(m, gateway.Options{ToolSearch: gateway.ToolSearch{Above: cat.Len(), Pinned: []string{"fx/echo"}}})
		// What serve does: the manager's recovery re-lists a server whose
		// tools changed and syncs the gateway.
		m.Recover(func(*tool.Catalog) { _ = g.Sync(ctx) })
		hs := httptest.NewServer(g.Mux("", gateway.Security{Loopback: true}))
		t.Cleanup(func() {
			hs.Close()
			g.Close()
		})
		changed := make(chan struct{}, 16)
		cs := dialEra(t, hs.URL+"/mcp", era, &mcp.Implementation{Name: "t"}, &mcp.ClientOptions{
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
		})
		if got := listNames(t, cs); len(got) != cat.Len() || slices.Contains(got, "find_tools") {
			t.Fatalf("at the threshold: %v", got)
		}
		if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__add_tool"}); err != nil || res.IsError {
			t.Fatalf("add_tool: %v %+v", err, res)
		}
		if !testservers.Eventually(30*time.Second, func() bool {
			return slices.Equal(listNames(t, cs), []string{"call_tool", "find_tools", "fx__echo"})
		}) {
			t.Fatalf("past the threshold: %v", listNames(t, cs))
		}
		select {
		case <-changed:
		case <-time.After(30 * time.Second):
			t.Fatal("the client was not told the tool list changed")
		}
	})
}

// Clients of both eras search and call at once, through one gateway,
// while the index is first built: every answer is right (and -race finds
// nothing).
func TestToolSearchConcurrent(t *testing.T) {
	_, url := catalogGateway(t, gateway.Options{ToolSearch: gateway.ToolSearch{Enabled: true}})
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := range 8 {
		cs := dialEra(t, url+"/mcp", eras[i%len(eras)], &mcp.Implementation{Name: "t"}, nil)
		wg.Go(func() {
			name, desc := testservers.CatalogTool(100 * i)
			for range 5 {
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "find_tools", Arguments: map[string]any{"query": desc, "limit": 5}})
				if err != nil || res.IsError {
					errs <- fmt.Sprintf("find_tools: %v", err)
					return
				}
				b, _ := json.Marshal(res.StructuredContent)
				if !strings.Contains(string(b), `"name":"fx__`+name+`"`) {
					errs <- fmt.Sprintf("find_tools %q: %s", desc, b)
				}
				res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "call_tool", Arguments: map[string]any{"name": "fx__" + name}})
				if err != nil || res.IsError {
					errs <- fmt.Sprintf("call_tool: %v", err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// call_tool of a tool of a server that is down is answered as a direct
// call of it would be: server_unavailable, by the governed path, in both
// eras.
func TestToolSearchServerDown(t *testing.T) {
	src, err := mcpsource.New(mcpsource.Config{Name: "broken", Transport: mcpsource.Stdio, Command: testservers.Fixture(t), Args: []string{"-exit", "2"}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(m, gateway.Options{ToolSearch: gateway.ToolSearch{Enabled: true}})
	hs := httptest.NewServer(g.Mux("", gateway.Security{Loopback: true}))
	// Before the client's cleanup (registered later, run first) has
	// closed its session, the server could not close.
	t.Cleanup(func() {
		hs.Close()
		g.Close()
		m.Close()
	})
	inEachEra(t, func(t *testing.T, era string) {
		cs := dialEra(t, hs.URL+"/mcp", era, &mcp.Implementation{Name: "t"}, nil)
		for _, p := range []*mcp.CallToolParams{
			{Name: "call_tool", Arguments: map[string]any{"name": "broken__echo"}},
			{Name: "broken__echo"},
		} {
			res, err := cs.CallTool(context.Background(), p)
			if err != nil || !res.IsError || res.Meta["toolmux/error_kind"] != string(tool.KindServerUnavailable) {
				t.Errorf("%s: %v %+v", p.Name, err, res)
			}
		}
	})
}
