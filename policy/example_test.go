package policy_test

import (
	"fmt"

	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// An engine decides, for each call, whether it runs, is refused or needs a
// person's approval: the user's rules first (highest priority first), then
// the mode's defaults.
func ExampleEngine_Decide() {
	e, err := policy.New(policy.ModeDefault, []policy.Rule{
		{Name: "git-read", Tools: []string{"shell"}, Args: map[string]string{"command": `^git (status|diff|log)\b`}, Action: policy.Allow, Priority: 2},
		{Name: "no-force-push", Tools: []string{"shell"}, Args: map[string]string{"command": `push .*--force`}, Action: policy.Deny, Priority: 3,
			Message: "force pushes are not allowed; push without --force"},
	})
	if err != nil {
		panic(err)
	}
	shell := tool.Tool{Server: "builtin", Name: "shell"} // no annotations: may change things
	read := tool.Tool{Server: "builtin", Name: "read_file", Annotations: tool.Annotations{ReadOnly: tool.Bool(true)}}

	for _, c := range []struct {
		t    tool.Tool
		args map[string]any
	}{
		{shell, map[string]any{"command": "git status"}},
		{shell, map[string]any{"command": "git push origin main --force"}},
		{shell, map[string]any{"command": "rm -rf build"}},
		{read, map[string]any{"path": "README.md"}},
	} {
		d := e.Decide(c.t, tool.Call{Server: c.t.Server, Tool: c.t.Name, Arguments: c.args})
		fmt.Printf("%s %v: %s (%s)\n", c.t.Name, c.args, d.Action, d.Rule)
	}
	// Output:
	// shell map[command:git status]: allow (git-read)
	// shell map[command:git push origin main --force]: deny (no-force-push)
	// shell map[command:rm -rf build]: ask (default mode: everything else)
	// read_file map[path:README.md]: allow (default mode: read-only tools)
}
