package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type progressLog struct {
	mu  sync.Mutex
	got []float64
}

// connect serves the fixture (its tool pid denied) through a gateway on
// a real HTTP server, and connects a client of protocol era to /mcp whose
// progress reports go to pl.
func connect(t *testing.T, era string, pl *progressLog) *mcp.ClientSession {
	t.Helper()
	_, url := fixtureGateway(t, gateway.Options{}, manager.ServerOptions{Deny: []string{"pid"}})
	return dialEra(t, url+"/mcp", era, &mcp.Implementation{Name: "test"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			pl.mu.Lock()
			pl.got = append(pl.got, r.Params.Progress)
			pl.mu.Unlock()
		},
	})
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

// The catalog is served under the exposed names server__tool, without
// the denied tools, with the tools' annotations, in both eras.
func TestCatalogServedUnderExposedNames(t *testing.T) {
	inEachEra(t, func(t *testing.T, era string) {
		cs := connect(t, era, &progressLog{})
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
	})
}

// Every kind of content part, and the structured content, reach the
// client through the gateway's own tools/call path, in both eras.
func TestEveryContentPartCrossesTheGateway(t *testing.T) {
	inEachEra(t, func(t *testing.T, era string) {
		cs := connect(t, era, &progressLog{})
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
	})
}

// A call of a denied tool is a JSON-RPC error (an unknown tool); a tool
// that fails, or whose server crashes, is answered with an isError
// result carrying its error kind, in both eras.
func TestFailuresAreToolResults(t *testing.T) {
	inEachEra(t, func(t *testing.T, era string) {
		cs := connect(t, era, &progressLog{})
		// A denied tool is not served at all: naming it is an unknown tool.
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "fx__pid"})
		var wire *jsonrpc.Error
		if !errors.As(err, &wire) || wire.Code != jsonrpc.CodeInvalidParams || !strings.Contains(wire.Message, "unknown tool") {
			t.Fatalf("denied tool: %v", err)
		}
		var data struct{ Kind string }
		if err := json.Unmarshal(wire.Data, &data); err != nil || data.Kind != string(tool.KindToolNotRegistered) {
			t.Errorf("denied tool's data: %s (%v)", wire.Data, err)
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
	})
}

// A tool's progress reports reach the client under its progress token:
// on the call's stream, in both eras.
func TestProgressIsForwarded(t *testing.T) {
	inEachEra(t, func(t *testing.T, era string) {
		pl := &progressLog{}
		cs := connect(t, era, pl)
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
			pl.mu.Lock()
			defer pl.mu.Unlock()
			t.Errorf("progress reports at the client: %v", pl.got)
		}
	})
}

// A tool a server adds is listed and called through the gateway, in both
// eras.
func TestToolListFollowsTheCatalog(t *testing.T) {
	inEachEra(t, func(t *testing.T, era string) {
		cs := connect(t, era, &progressLog{})
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
	})
}
