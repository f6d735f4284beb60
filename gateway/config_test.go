package gateway_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/mcpsource"
)

// A route's bounds are its server's passthrough section, else the global
// one, key by key, else the defaults.
func TestRouteFromConfig(t *testing.T) {
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`passthrough: {max_sessions: 4}
servers:
  a: {command: a, passthrough: {idle_timeout: 1m}}
  b: {command: b}
  c: {url: "http://127.0.0.1:1/mcp", passthrough: {max_sessions: 2, idle_timeout: 30s}}
`), config.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	bare, err := config.ParseWith("toolmux.yaml", []byte("servers:\n  d: {command: d}\n"), config.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var routes []gateway.Route
	for _, c := range []*config.Config{cfg, bare} {
		for _, sc := range c.Servers {
			routes = append(routes, gateway.RouteFromConfig(c, sc, mcpsource.Config{Name: sc.Name, Command: sc.Command, URL: sc.URL}))
		}
	}
	g := gateway.New(chain{}, gateway.Options{Passthrough: routes})
	defer g.Close()
	want := []gateway.RouteSessions{
		{Server: "a", Max: 4, IdleTimeout: time.Minute},
		{Server: "b", Max: 4, IdleTimeout: gateway.DefaultIdleTimeout},
		{Server: "c", Max: 2, IdleTimeout: 30 * time.Second},
		{Server: "d", Max: gateway.DefaultMaxSessions, IdleTimeout: gateway.DefaultIdleTimeout},
	}
	got := g.PassthroughSessions()
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got %+v, want %+v", got[i], want[i])
		}
	}
}

// The configuration's bound of tool_search.limit is the gateway's, and
// its sections become the gateway's options key for key.
func TestToolSearchAndVirtualFromConfig(t *testing.T) {
	if config.MaxFindLimit != gateway.MaxFindLimit {
		t.Fatalf("config.MaxFindLimit %d, gateway.MaxFindLimit %d", config.MaxFindLimit, gateway.MaxFindLimit)
	}
	cfg, err := config.ParseWith("toolmux.yaml", []byte(`tool_search: {above: 100, pinned: [a/b], limit: 5}
virtual_servers:
  - {name: v, description: d, tools: ["a/*"], rename: {a/b: c}, descriptions: {a/b: e}, tool_search: {enabled: true}}
`), config.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if got := gateway.ToolSearchFromConfig(cfg.ToolSearch); !reflect.DeepEqual(got, gateway.ToolSearch{Above: 100, Pinned: []string{"a/b"}, Limit: 5}) {
		t.Errorf("tool search: %+v", got)
	}
	want := []gateway.Virtual{{Name: "v", Description: "d", Tools: []string{"a/*"}, Rename: map[string]string{"a/b": "c"},
		Describe: map[string]string{"a/b": "e"}, ToolSearch: gateway.ToolSearch{Enabled: true}}}
	if got := gateway.VirtualFromConfig(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("virtual servers: %+v", got)
	}
}
