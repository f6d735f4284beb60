package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/llm"
	"github.com/toolmux/toolmux/stream"
)

// rig is a whole toolmux runtime for one test: the fixture MCP server over
// stdio and the built-in tools on a temporary workspace, a task log in a
// temporary data directory, and a scripted model.
type rig struct {
	rt    *toolmux.Runtime
	model *llmtest.Server
	dir   string
	sub   *stream.Subscription
}

// newRig builds a rig; extra is YAML added to the configuration (agent:,
// agents:, pipeline: ...), fixtureArgs are the fixture's flags.
func newRig(t *testing.T, script llmtest.Script, extra string, fixtureArgs ...string) *rig {
	t.Helper()
	r := &rig{dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(r.dir, "notes.txt"), []byte("the answer is 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.model = llmtest.OpenAI(t, script)
	args := ""
	for _, a := range fixtureArgs {
		args += fmt.Sprintf("%q, ", a)
	}
	yaml := fmt.Sprintf(`
workspace: %q
data_dir: %q
policy: {mode: yolo}
model: {base_url: %q, model: scripted, retry: {initial_backoff: 10ms, max_backoff: 50ms}}
servers:
  fixture:
    command: %q
    args: [%s]
%s`, r.dir, filepath.Join(r.dir, ".data"), r.model.BaseURL(), testservers.Fixture(t), strings.TrimSuffix(args, ", "), extra)
	cfg, err := config.Parse(filepath.Join(r.dir, "toolmux.yaml"), []byte(yaml))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yaml)
	}
	ctx := context.Background()
	r.rt, err = toolmux.Open(ctx, cfg, toolmux.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.rt.Close(cctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	r.sub, err = r.rt.Events.Subscribe(ctx, stream.Filter{}, stream.Live)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// run runs the main agent on task.
func (r *rig) run(t *testing.T, task string) (*agent.Result, error) {
	t.Helper()
	a, err := r.rt.Agent()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return a.Run(ctx, task)
}

func call(name, args string) llmtest.Call { return llmtest.Call{Name: name, Args: args} }

func calls(cs ...llmtest.Call) llmtest.Reply { return llmtest.Reply{Calls: cs} }

func answer(text string) llmtest.Reply { return llmtest.Reply{Content: text} }

var _ = llm.RoleUser
