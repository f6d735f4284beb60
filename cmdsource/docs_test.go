package cmdsource_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/cmdsource"
	"github.com/toolmux/toolmux/tool"
)

// exampleBlock matches a fenced block whose info string names the file it
// holds: ```sh discover.sh
var exampleBlock = regexp.MustCompile("(?ms)^```sh ([A-Za-z0-9_.-]+)\n(.*?)^```$")

// TestDocsExamples runs the example scripts of docs/discovery.md through a
// Source, so the documentation cannot drift from the behaviour.
func TestDocsExamples(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "discovery.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	found := map[string]bool{}
	for _, m := range exampleBlock.FindAllSubmatch(doc, -1) {
		name := string(m[1])
		if err := os.WriteFile(filepath.Join(dir, name), m[2], 0o755); err != nil {
			t.Fatal(err)
		}
		found[name] = true
	}
	if !found["discover.sh"] || !found["call.sh"] {
		t.Fatalf("examples found: %v, want discover.sh and call.sh", found)
	}

	// As the text says: relative programs, found in the directory.
	s := newSource(t, cmdsource.Config{Name: "discovered", Dir: dir, Discover: []string{"./discover.sh"}, Call: []string{"./call.sh"}})
	ctx := testContext(t)
	tools, err := s.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(tools); strings.Join(got, ",") != "greet,disk_free" {
		t.Fatalf("tools = %v", got)
	}
	greet := tools[0]
	props, _ := greet.InputSchema["properties"].(map[string]any)
	name, _ := props["name"].(map[string]any)
	if greet.Exposed != "discovered__greet" || greet.InputSchema["type"] != "object" || name["type"] != "string" {
		t.Errorf("greet = %+v", greet)
	}
	if tools[1].Exposed != "discovered__disk_free" || tools[1].Description == "" {
		t.Errorf("disk_free = %+v", tools[1])
	}

	res, err := s.Call(ctx, "greet", map[string]any{"name": "Ada"})
	if err != nil || res.Text() != "Hello, Ada!\n" {
		t.Errorf("greet Ada: result %+v, error %v", res, err)
	}
	_, err = s.Call(ctx, "greet", map[string]any{})
	if te := tool.AsError(err); te == nil || te.Kind != tool.KindToolError || !strings.Contains(te.Detail, `greet: the argument "name" is required`) {
		t.Errorf("greet without a name: %v", err)
	}
	res, err = s.Call(ctx, "disk_free", map[string]any{"path": dir})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := res.Structured.(map[string]any)
	if kb, ok := st["available_kb"].(float64); !ok || kb <= 0 || st["path"] != dir {
		t.Errorf("disk_free: result %q, structured %v", res.Text(), res.Structured)
	}
	res, err = s.Call(ctx, "disk_free", nil)
	if st, _ := res.Structured.(map[string]any); err != nil || st["path"] != "/" {
		t.Errorf("disk_free without a path: result %+v, error %v", res, err)
	}
}
