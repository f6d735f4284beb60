package toolmux_test

import (
	"cmp"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/llm"
)

// shopScript is the model of the examples: it asks for the stock of
// apples, then answers with the tool's result, which it finds in the
// second request only if the tool really ran (and "I was not shown the
// stock" otherwise, so that the examples' output gives it away).
func shopScript(n int, req llmtest.Request) llmtest.Reply {
	switch n {
	case 0:
		return llmtest.Reply{Calls: []llmtest.Call{{Name: "shop__stock", Args: `{"item": "apples"}`}}}
	case 1:
		last := req.Messages[len(req.Messages)-1]
		if last["role"] == "tool" && last["content"] == "12" {
			return llmtest.Reply{Content: "There are 12 apples in stock."}
		}
		return llmtest.Reply{Content: "I was not shown the stock."}
	}
	return llmtest.Reply{Status: 500}
}

// exampleTB stands in for the testing.TB llmtest wants, in Example, which
// has none: llmtest uses it only to close its server at the end.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (e *exampleTB) Cleanup(f func()) { e.cleanups = append(e.cleanups, f) }

// scriptedModel starts the examples' scripted model and returns it as the
// OpenAI provider a program would use, and the function that stops it.
func scriptedModel() (llm.Model, func()) {
	tb := &exampleTB{}
	srv := llmtest.OpenAI(tb, shopScript)
	model, err := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.BaseURL(), Model: "scripted"})
	if err != nil {
		panic(err)
	}
	return model, func() {
		for _, f := range tb.cleanups {
			f()
		}
	}
}

// TestLibraryExample builds examples/library and runs it against the
// scripted model, configured the way a user would: by the environment.
func TestLibraryExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		testservers.Missing(t, "no go command: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "library")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, goTool, "build", "-o", bin, "./examples/library")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	srv := llmtest.OpenAI(t, shopScript)
	run := exec.CommandContext(ctx, bin, "How many apples are in stock?")
	// The program's working directory is the built-in tools' workspace:
	// an empty one, so that nothing of the repository is in reach.
	run.Dir = t.TempDir()
	run.Env = append(os.Environ(), "OPENAI_BASE_URL="+srv.BaseURL(), "OPENAI_API_KEY=test-key", "TOOLMUX_MODEL=scripted-model",
		"HOME="+t.TempDir())
	var stderr strings.Builder
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("library: %v\n%s", err, stderr.String())
	}
	if got := strings.TrimSpace(string(out)); got != "There are 12 apples in stock." {
		t.Errorf("answer %q; stderr:\n%s", got, stderr.String())
	}

	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	if !slices.Contains(reqs[0].Tools, "shop__stock") || !slices.Contains(reqs[0].Tools, "builtin__read_file") {
		t.Errorf("the program's tool is offered beside the built-in ones: %v", reqs[0].Tools)
	}
	if m := reqs[0].Raw["model"]; m != "scripted-model" {
		t.Errorf("model %v: TOOLMUX_MODEL was not used", m)
	}
	tool := reqs[1].Messages[len(reqs[1].Messages)-1]
	if tool["role"] != "tool" || tool["content"] != "12" {
		t.Errorf("the second request does not carry the tool's result: %v", tool)
	}
	if entries, _ := os.ReadDir(run.Dir); len(entries) != 0 {
		t.Errorf("the program wrote into its workspace: %v", entries)
	}
}

// TestMiroflowExampleAgents loads examples/miroflow.yaml, whose servers
// need uv and MiroFlow's Python, and builds its agents without starting
// any: MiroFlow's layout of a main agent and a browsing sub-agent.
func TestMiroflowExampleAgents(t *testing.T) {
	for _, protocol := range []string{"", "native"} {
		t.Setenv("TOOLMUX_TOOL_PROTOCOL", protocol)
		cfg, err := config.Load("examples/miroflow.yaml")
		if err != nil {
			t.Fatal(err)
		}
		want := cmp.Or(protocol, config.ProtocolText)
		main, subs := cfg.Agent, cfg.Agents
		if !cfg.Model.Set || cfg.Model.Provider != config.ProviderOpenAI || cfg.Model.Name == "" {
			t.Errorf("model: %+v", cfg.Model)
		}
		if main.ToolProtocol != want || main.MaxTurns != 20 || main.MaxConsecutiveRollbacks != 5 || !main.BoxedAnswer ||
			!slices.Equal(main.Agents, []string{"browsing"}) || !slices.Contains(main.Tools, "tool-python/*") ||
			!slices.Contains(main.Tools, "builtin/read_file") || !strings.Contains(main.SystemPrompt, `\boxed{}`) {
			t.Errorf("main agent: %+v", main)
		}
		if len(subs) != 1 || subs[0].Name != "browsing" || subs[0].Tool != "search_and_browse" || subs[0].MaxTurns != 15 ||
			subs[0].ToolProtocol != want || subs[0].Description == "" || subs[0].SystemPrompt == "" ||
			!slices.Contains(subs[0].Tools, "tool-google-search/*") || !slices.Contains(subs[0].Tools, "builtin/web_fetch") {
			t.Fatalf("browsing agent: %+v", subs)
		}

		cfg.DataDir = t.TempDir()
		ctx := context.Background()
		rt, err := toolmux.Open(ctx, cfg, toolmux.Options{NoTaskLog: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.Agent(); err != nil {
			t.Errorf("main agent: %v", err)
		}
		if servers := rt.Manager.Servers(); !slices.Contains(servers, "agent-browsing") || !slices.Contains(servers, "tool-python") {
			t.Errorf("servers: %v", servers)
		}
		if err := rt.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	}
}
