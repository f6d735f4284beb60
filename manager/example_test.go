package manager_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/tool"
)

// A manager over the built-in tools of a directory: list the catalog, make
// a call, and branch on the kind of a failure.
func Example() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	_ = os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello, tools\n"), 0o644)

	src, err := builtin.New(dir)
	if err != nil {
		panic(err)
	}
	m, err := manager.New(
		manager.WithSource(src, manager.ServerOptions{}),
		manager.WithFilter(nil, []string{"builtin/grep"}),
	)
	if err != nil {
		panic(err)
	}
	defer m.Close()
	ctx := context.Background()

	cat, _ := m.Tools(ctx)
	for _, t := range cat.Tools() {
		fmt.Println(t.Exposed)
	}

	rec := m.Call(ctx, tool.Call{Server: "builtin", Tool: "read_file", Arguments: map[string]any{"path": "hello.txt"}})
	fmt.Println(rec.Result.Text())

	rec = m.Call(ctx, tool.Call{Server: "builtin", Tool: "grep", Arguments: map[string]any{"pattern": "hello"}})
	fmt.Println(tool.KindOf(rec.Err()))

	rec = m.Call(ctx, tool.Call{Server: "builtin", Tool: "read_file", Arguments: map[string]any{"path": "../../etc/passwd"}})
	fmt.Println(tool.KindOf(rec.Err()))
	// Output:
	// builtin__edit
	// builtin__glob
	// builtin__list_directory
	// builtin__memory
	// builtin__read_file
	// builtin__shell
	// builtin__web_fetch
	// builtin__write_file
	// hello, tools
	// policy_violation
	// path_not_in_workspace
}
