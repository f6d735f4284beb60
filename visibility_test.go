package toolmux_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/funcsource"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/llm"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/policy"
)

// An agent run made for a caller is offered only the tools its groups
// see, and a call of another (here in the same turn as one it may make)
// is answered as the call of a tool that does not exist, without running;
// a run without a caller sees and calls everything, as before.
func TestAgentRunSeesItsCallersTools(t *testing.T) {
	var (
		mu  sync.Mutex
		ran []string
	)
	did := func(what string) {
		mu.Lock()
		ran = append(ran, what)
		mu.Unlock()
	}
	src := funcsource.New("shop",
		funcsource.Func("stock", "Counts an item.", func(_ context.Context, in struct{ Item string }) (string, error) {
			did("stock")
			return "12", nil
		}),
		funcsource.Func("order", "Orders an item.", func(_ context.Context, in struct{ Item string }) (string, error) {
			did("order")
			return "ordered", nil
		}))
	srv := llmtest.OpenAI(t, func(_ int, req llmtest.Request) llmtest.Reply {
		_, assistants, results := req.Dialogue()
		if assistants == 0 {
			return llmtest.Reply{Calls: []llmtest.Call{{Name: "shop__stock", Args: `{"item": "apples"}`}, {Name: "shop__order", Args: `{"item": "apples"}`}}}
		}
		return llmtest.Reply{Content: strings.Join(results, " | ")}
	})
	model, err := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.BaseURL(), Model: "scripted"})
	if err != nil {
		t.Fatal(err)
	}
	vis, err := policy.NewVisibility(map[string][]string{"clerks": {"shop/stock"}}, "admin")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Builtin.Enabled = false
	rt, err := toolmux.Open(context.Background(), cfg, toolmux.Options{Model: model, Mode: policy.ModeYolo, Sources: []manager.Source{src},
		Visibility: func() *policy.Visibility { return vis }})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())

	clerk := identity.With(context.Background(), &identity.Caller{Subject: "key:c", Name: "c", Groups: []string{"clerks"}, Method: identity.MethodNKey})
	res, err := rt.Run(clerk, toolmux.Task{Input: "stock and order apples"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ran, []string{"stock"}) || !strings.Contains(res.Answer, "12") || !strings.Contains(res.Answer, "tool_not_registered") {
		t.Fatalf("the clerk's run ran %v and was told %q", ran, res.Answer)
	}
	if offered := srv.Requests()[0].Tools; !slices.Contains(offered, "shop__stock") || slices.Contains(offered, "shop__order") {
		t.Errorf("the clerk's run was offered %v", offered)
	}

	ran = nil
	res, err = rt.Run(context.Background(), toolmux.Task{Input: "stock and order apples"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ran, []string{"stock", "order"}) && !slices.Equal(ran, []string{"order", "stock"}) || strings.Contains(res.Answer, "tool_not_registered") {
		t.Fatalf("a run without a caller ran %v and was told %q", ran, res.Answer)
	}
}
