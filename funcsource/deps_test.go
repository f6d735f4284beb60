package funcsource_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/manager"
)

// A Source is a manager.Source: checked here, so that the package itself
// need not import the manager.
var _ manager.Source = (*funcsource.Source)(nil)

// TestDependencies keeps funcsource light: a program that only writes
// tools as Go functions must not link the MCP SDK, the web page reader,
// the PDF reader or a YAML parser. They come in through the manager's
// sources and the configuration, which funcsource must not import.
func TestDependencies(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		testservers.Missing(t, "no go command: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/toolmux/toolmux/funcsource").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"github.com/modelcontextprotocol/go-sdk",
		"github.com/go-shiori/go-readability",
		"github.com/ledongthuc/pdf",
		"go.yaml.in/yaml",
		"gopkg.in/yaml",
		"github.com/toolmux/toolmux/config",
		"github.com/toolmux/toolmux/mcpsource",
		"github.com/toolmux/toolmux/web",
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing")
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("funcsource depends on %s", dep)
			}
		}
	}
}
