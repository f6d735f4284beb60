package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/manager"
)

// The governed catalog of a runtime served as an MCP endpoint of a
// program's own HTTP server, beside its other routes: gateway.Scheduled
// gives the gateway the pipeline's catalog and the scheduler's calls, so
// every call takes the policy gate, the pipeline and the manager.
func ExampleScheduled() {
	ctx := context.Background()
	add := funcsource.Func("add", "Adds two numbers.", func(_ context.Context, in struct {
		A float64 `json:"a"`
		B float64 `json:"b"`
	}) (string, error) {
		return fmt.Sprint(in.A + in.B), nil
	}, funcsource.ReadOnly())
	cfg := config.Default()
	cfg.Builtin.Enabled = false // only the program's own tool
	rt, err := toolmux.Open(ctx, cfg, toolmux.Options{NoTaskLog: true, NoAgents: true,
		Sources: []manager.Source{funcsource.New("math", add)}})
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)
	g := gateway.New(gateway.Scheduled{Catalog: rt.Pipeline, Calls: rt.Scheduler}, gateway.Options{})
	defer g.Close()

	mux := http.NewServeMux()
	mux.Handle("/mcp", g.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// Any MCP client can now connect; here, the go-sdk's.
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "client"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, nil)
	if err != nil {
		panic(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "math__add", Arguments: map[string]any{"a": 17.5, "b": 24.5}})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	// Output: 42
}
