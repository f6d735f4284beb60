package gateway_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/codemode"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/testservers"
)

// Without code mode's engine program, code mode turned on offers no
// run_code, and a call of that name is answered as the call of a tool
// that does not exist: nothing runs.
func TestCodeModeWithoutEngine(t *testing.T) {
	pin, _ := testservers.CatalogTool(0)
	c, url := catalogGateway(t, gateway.Options{ToolSearch: gateway.ToolSearch{Enabled: true, Pinned: []string{"fx/" + pin}},
		CodeMode: gateway.CodeMode{Enabled: true, Bounds: codemode.Options{Engine: filepath.Join(t.TempDir(), "none")}}})
	cs := dialHTTP(t, url+"/mcp")
	if names := listNames(t, cs); slices.Contains(names, "run_code") {
		t.Fatalf("/mcp lists %v", names)
	}
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": "return 1"}})
	if err == nil {
		t.Fatal("run_code was answered")
	}
	if got := c.seen(); len(got) != 0 {
		t.Fatalf("calls made: %v", got)
	}
}
