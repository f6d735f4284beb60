package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/agent"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
	"github.com/toolmux/toolmux/llm"
	"github.com/toolmux/toolmux/metrics"
	"github.com/toolmux/toolmux/ratelimit"
	"github.com/toolmux/toolmux/schedule"
)

var (
	_ schedule.Sink  = (*metrics.Metrics)(nil)
	_ agent.Observer = (*metrics.Metrics)(nil)
)

// scrape GETs the handler through a real HTTP server and parses the
// answer with Prometheus's text parser.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no %s", name)
	}
next:
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if w, ok := labels[l.GetName()]; ok && w != l.GetValue() {
				continue next
			}
		}
		if m.Counter != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}

// An agent run against the scripted model: a reply rolled back, a turn
// with a call, the answer. The metrics count the run by state, the
// turns, the rollback and the tokens by the model that answered, and the
// call by server, tool and kind.
func TestAgentRunMetrics(t *testing.T) {
	t.Parallel()
	lm := llmtest.OpenAI(t, llmtest.Replies(
		llmtest.Reply{Content: "DROPPED", Calls: []llmtest.Call{{Name: "fixture__echo", Args: `[1,2`}}},
		llmtest.Reply{Calls: []llmtest.Call{{Name: "fixture__echo", Args: `{"message": "hi"}`}}},
		llmtest.Reply{Content: "done", Finish: "stop"},
	))
	dir := t.TempDir()
	yaml := fmt.Sprintf(`
workspace: %q
data_dir: %q
policy: {mode: yolo}
model: {base_url: %q, model: scripted, retry: {initial_backoff: 10ms, max_backoff: 50ms}}
servers:
  fixture:
    command: %q
`, dir, filepath.Join(dir, ".data"), lm.BaseURL(), testservers.Fixture(t))
	cfg, err := config.Parse(filepath.Join(dir, "toolmux.yaml"), []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := metrics.New()
	rt, err := toolmux.Open(ctx, cfg, toolmux.Options{Sinks: []schedule.Sink{m}, AgentObserver: m})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.WithoutCancel(ctx))
	m.Watch(metrics.Sources{Catalog: rt.Manager.Catalog, Health: rt.Manager.Health, Events: rt.Events.Stats, TaskLog: rt.Log})
	a, err := rt.Agent()
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Run(ctx, "Echo something.")
	if err != nil || res.Rollbacks != 1 || res.Turns != 2 {
		t.Fatalf("run: %v %+v, want 2 turns and 1 rollback", err, res)
	}
	// The task log's steps (toolmux logs show) number the same turns:
	// the rolled-back call and its retry are both turn 1.
	steps, err := rt.Log.Steps(ctx, res.Task)
	if err != nil {
		t.Fatal(err)
	}
	var llmSteps []string
	for _, st := range steps {
		if strings.HasSuffix(st.Name, "| llm") {
			llmSteps = append(llmSteps, st.Name)
		}
	}
	if want := []string{"main | turn 1 | llm", "main | turn 1 | llm", "main | turn 2 | llm"}; !slices.Equal(llmSteps, want) {
		t.Errorf("model call steps %q, want %q", llmSteps, want)
	}
	fams := scrape(t, m.Handler())
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"toolmux_agent_runs_total", map[string]string{"state": "answered"}, 1},
		// Two turns kept (the call's, the answer's); the rolled-back
		// model call is not one.
		{"toolmux_agent_turns_total", map[string]string{"model": "scripted"}, 2},
		{"toolmux_agent_rollbacks_total", map[string]string{"model": "scripted"}, 1},
		// The scripted model reports 10×(n+1) input and 5 output tokens
		// for its nth request.
		{"toolmux_agent_input_tokens_total", map[string]string{"model": "scripted"}, 10 + 20 + 30},
		{"toolmux_agent_output_tokens_total", map[string]string{"model": "scripted"}, 15},
		{"toolmux_calls_total", map[string]string{"server": "fixture", "tool": "echo", "kind": "ok"}, 1},
		{"toolmux_server_state", map[string]string{"server": "fixture", "state": "ready"}, 1},
	} {
		if v := value(t, fams, c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	if fams["toolmux_tasklog_journal_bytes"] == nil {
		t.Error("no journal size")
	}
}

// The model label is bounded: past 16 names, a provider's new names count
// as "other".
func TestModelLabelBounded(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	for i := range 100 {
		m.ModelCall(fmt.Sprint("model-", i), llm.Usage{InputTokens: 1})
		m.Turn(fmt.Sprint("model-", i))
	}
	fams := scrape(t, m.Handler())
	if n := len(fams["toolmux_agent_turns_total"].GetMetric()); n != 17 {
		t.Errorf("%d model series, want 16 and other", n)
	}
	if v := value(t, fams, "toolmux_agent_turns_total", map[string]string{"model": "other"}); v != 84 {
		t.Errorf("other: %v turns, want 84", v)
	}
}

// The caller label is bounded: a limiter that admitted the calls of more
// API keys than its MaxLabels, and of tokens' subjects, is scraped with
// one series per key within the bound and "other" for the rest; a
// subject is never a label.
func TestCallerLabelBounded(t *testing.T) {
	t.Parallel()
	const maxLabels = 4
	lim := ratelimit.New(ratelimit.Options{PerCaller: ratelimit.Limit{CallsPerMinute: 1}, MaxLabels: maxLabels})
	admit := func(c *identity.Caller) error {
		release, err := lim.Admit(identity.With(context.Background(), c), 1)
		if err == nil {
			release()
		}
		return err
	}
	for i := range maxLabels + 1 { // one more key than labels allowed
		name := fmt.Sprint("key-", i)
		if err := admit(&identity.Caller{Subject: identity.KeySubject(name), Name: name, Method: identity.MethodKey}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		c := &identity.Caller{Subject: fmt.Sprint("subject-", i), Name: fmt.Sprint("subject-", i), Method: identity.MethodJWT}
		_ = admit(c)
		if admit(c) == nil {
			t.Fatal("a second call within the minute admitted")
		}
	}
	m := metrics.New()
	m.Watch(metrics.Sources{Callers: lim.Stats})
	fams := scrape(t, m.Handler())
	if n := len(fams["toolmux_caller_calls_total"].GetMetric()); n != maxLabels+1 {
		t.Errorf("%d caller series, want %d keys and other", n, maxLabels)
	}
	if v := value(t, fams, "toolmux_caller_calls_total", map[string]string{"caller": "other"}); v != 1+10 {
		t.Errorf("other: %v calls, want 11 (the key past the bound, the subjects)", v)
	}
	if v := value(t, fams, "toolmux_rate_limited_total", map[string]string{"caller": "other", "group": "", "limit": "calls_per_minute"}); v != 10 {
		t.Errorf("refused: %v, want 10", v)
	}
	for _, name := range []string{"toolmux_caller_calls_total", "toolmux_rate_limited_total"} {
		for _, s := range fams[name].GetMetric() {
			for _, l := range s.GetLabel() {
				if strings.HasPrefix(l.GetValue(), "subject-") {
					t.Errorf("%s has a subject as a label: %v", name, s)
				}
			}
		}
	}
}
