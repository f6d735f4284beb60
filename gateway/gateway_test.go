package gateway_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/mcpsource"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type progressLog struct {
	mu  sync.Mutex
	got []float64
}

func connect(t *testing.T, pl *progressLog) *mcp.ClientSession {
	t.Helper()
	src, err := mcpsource.New(mcpsource.Config{Name: "fx", Transport: mcpsource.Stdio, Command: testservers.Fixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := manager.New(manager.WithSource(src, manager.ServerOptions{Deny: []string{"pid"}}))
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(m, gateway.Options{})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := g.Server().Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			pl.mu.Lock()
			pl.got = append(pl.got, r.Params.Progress)
			pl.mu.Unlock()
		},
	})
	cs, err := client.Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Close()
		m.Close()
	})
	return cs
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

func TestCatalogServedUnderExposedNames(t *testing.T) {
	cs := connect(t, &progressLog{})
	names := toolNames(t, cs)
	if !slices.Contains(names, "fx__echo") || slices.Contains(names, "fx__pid") {
		t.Fatalf("tools: %v", names)
	}
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range res.Tools {
		if tl.Name == "fx__echo" && (tl.Annotations == nil || !tl.Annotations.ReadOnlyHint) {
			t.Errorf("annotations lost: %+v", tl.Annotations)
		}
	}
}

func TestEveryContentPartCrossesTheGateway(t *testing.T) {
	cs := connect(t, &progressLog{})
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fx__parts"})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, c := range res.Content {
		switch c.(type) {
		case *mcp.TextContent:
			kinds = append(kinds, "text")
		case *mcp.ImageContent:
			kinds = append(kinds, "image")
		case *mcp.AudioContent:
			kinds = append(kinds, "audio")
		case *mcp.EmbeddedResource:
			kinds = append(kinds, "resource")
		case *mcp.ResourceLink:
			kinds = append(kinds, "resource_link")
		}
	}
	if !slices.Equal(kinds, []string{"text", "image", "audio", "resource", "resource_link", "text"}) {
		t.Errorf("parts: %v", kinds)
	}
	if sc, ok := res.StructuredContent.(map[string]any); !ok || sc["answer"] != float64(42) {
		t.Errorf("structured content: %#v", res.StructuredContent)
	}
}

func TestFailuresAreToolResults(t *testing.T) {
	cs := connect(t, &progressLog{})
	// A denied tool is not served at all: naming it is an unknown tool.
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fx__pid"}); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("denied tool: %v", err)
	}
	for name, kind := range map[string]string{"fx__crash": "server_unavailable", "fx__fail": "tool_error"} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !res.IsError {
			t.Errorf("%s: not an error result", name)
		}
		text := res.Content[0].(*mcp.TextContent).Text
		if name == "fx__crash" && (!strings.Contains(text, kind) || !strings.Contains(text, "simulated crash") || res.Meta["toolmux/error_kind"] != kind) {
			t.Errorf("%s: %q %v", name, text, res.Meta)
		}
		if name == "fx__fail" && !strings.Contains(text, "failed on purpose") {
			t.Errorf("%s: %q", name, text)
		}
	}
}

func TestProgressIsForwarded(t *testing.T) {
	pl := &progressLog{}
	cs := connect(t, pl)
	params := &mcp.CallToolParams{Name: "fx__progress", Arguments: map[string]any{"steps": 3, "delay_ms": 20}}
	params.SetProgressToken("p1")
	if _, err := cs.CallTool(context.Background(), params); err != nil {
		t.Fatal(err)
	}
	ok := testservers.Eventually(3*time.Second, func() bool {
		pl.mu.Lock()
		defer pl.mu.Unlock()
		return len(pl.got) == 3
	})
	if !ok {
		t.Errorf("progress reports at the client: %v", pl.got)
	}
}

func TestToolListFollowsTheCatalog(t *testing.T) {
	cs := connect(t, &progressLog{})
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fx__add_tool"}); err != nil {
		t.Fatal(err)
	}
	ok := testservers.Eventually(5*time.Second, func() bool { return slices.Contains(toolNames(t, cs), "fx__added_1") })
	if !ok {
		t.Fatal("the added tool never appeared through the gateway")
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fx__added_1"})
	if err != nil || res.IsError {
		t.Fatalf("calling the added tool: %v %+v", err, res)
	}
}
