package main_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/toolmux/toolmux/internal/llmtest"
	"github.com/toolmux/toolmux/internal/testservers"
)

// scrape GETs /metrics (with the bearer token when given) and parses it
// with Prometheus's own text parser.
func scrape(t *testing.T, p *serveProc, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.url("/metrics"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// sample finds the series of family name whose labels include want, and
// returns its value (a histogram's count); ok is false when there is
// none.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (v float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, w := range want {
			if have[k] != w {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func wantSample(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string, want float64) {
	t.Helper()
	v, ok := sample(fams, name, labels)
	if !ok {
		t.Errorf("%s%v: no such series", name, labels)
		return
	}
	if v != want {
		t.Errorf("%s%v = %v, want %v", name, labels, v, want)
	}
}

// A real serve with --metrics: calls that succeed, fail as tools and name
// no tool, an approval, then /metrics parsed with Prometheus's parser
// counts each by server, tool and kind; the servers' health, the event
// hub and the task log are there too.
func TestServeMetrics(t *testing.T) {
	t.Parallel()
	p := startServeProc(t, workspace(t, fixtureConfig(t)), t.TempDir(), "--metrics")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := p.connect(t, ctx)
	defer cs.Close()

	for i := range 3 {
		out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"message": fmt.Sprint("hi ", i)}})
		if err != nil || out.IsError {
			t.Fatalf("fx__echo: %v %+v", err, out)
		}
	}
	out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__fail", Arguments: map[string]any{}})
	if err != nil || !out.IsError {
		t.Fatalf("fx__fail: %v %+v", err, out)
	}
	// A name the catalog does not hold, through the API (its governed
	// path): counted, with no tool label.
	resp, err := http.Post(p.url("/api/tools/fx/nope/call"), "application/json", strings.NewReader(`{"arguments": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	// An approval: the call waits (and is counted pending), then is
	// answered.
	p.attach(t)
	done := make(chan int, 1)
	go func() {
		resp, err := http.Post(p.url("/api/tools/builtin/shell/call"), "application/json", strings.NewReader(`{"arguments": {"command": "echo ok"}}`))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	var pending []struct{ ID string }
	if !testservers.Eventually(30*time.Second, func() bool {
		pending = nil
		p.getJSON(t, "/api/approvals", &pending)
		return len(pending) == 1
	}) {
		t.Fatal("the shell call never waited for approval")
	}
	wantSample(t, scrape(t, p, ""), "toolmux_approvals_pending", nil, 1)
	ans, err := http.Post(p.url("/api/approvals/"+pending[0].ID), "application/json", strings.NewReader(`{"decision": "once"}`))
	if err != nil {
		t.Fatal(err)
	}
	ans.Body.Close()
	if code := <-done; code != http.StatusOK {
		t.Fatalf("the approved call ended %d", code)
	}

	fams := scrape(t, p, "")
	wantSample(t, fams, "toolmux_calls_total", map[string]string{"server": "fx", "tool": "echo", "kind": "ok"}, 3)
	wantSample(t, fams, "toolmux_calls_total", map[string]string{"server": "fx", "tool": "fail", "kind": "tool_error"}, 1)
	wantSample(t, fams, "toolmux_calls_total", map[string]string{"server": "fx", "tool": "", "kind": "tool_not_registered"}, 1)
	wantSample(t, fams, "toolmux_calls_total", map[string]string{"server": "builtin", "tool": "shell", "kind": "ok"}, 1)
	wantSample(t, fams, "toolmux_call_duration_seconds", map[string]string{"server": "fx", "tool": "echo"}, 3)
	wantSample(t, fams, "toolmux_approvals_pending", nil, 0)
	wantSample(t, fams, "toolmux_approval_wait_seconds", map[string]string{"state": "executing"}, 1)
	wantSample(t, fams, "toolmux_approvers", nil, 1)
	wantSample(t, fams, "toolmux_server_state", map[string]string{"server": "fx", "state": "ready"}, 1)
	wantSample(t, fams, "toolmux_server_state", map[string]string{"server": "fx", "state": "failed"}, 0)
	wantSample(t, fams, "toolmux_server_state", map[string]string{"server": "broken", "state": "failed"}, 1)
	wantSample(t, fams, "toolmux_server_breaker_state", map[string]string{"server": "fx", "state": "closed"}, 1)
	wantSample(t, fams, "toolmux_passthrough_sessions", map[string]string{"server": "fx"}, 0)
	wantSample(t, fams, "toolmux_event_subscribers", nil, 1)
	if v, _ := sample(fams, "toolmux_events_published_total", nil); v == 0 {
		t.Error("no events counted published")
	}
	if v, _ := sample(fams, "toolmux_tasklog_journal_bytes", nil); v == 0 {
		t.Error("the journal counted empty")
	}
	if _, ok := sample(fams, "toolmux_tasklog_index_lag_bytes", nil); !ok {
		t.Error("no index lag")
	}
	if v, _ := sample(fams, "toolmux_server_restarts_total", map[string]string{"server": "fx"}); v != 0 {
		t.Errorf("fx restarted %v times", v)
	}
	checkDocumented(t, fams)
}

// Many distinct arguments and made-up tool names add no series: labels
// are the catalog's names and the kinds, never what a client sends.
func TestServeMetricsCardinality(t *testing.T) {
	t.Parallel()
	p := startServeProc(t, workspace(t, fixtureConfig(t)), t.TempDir(), "--metrics")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := p.connect(t, ctx)
	defer cs.Close()
	series := func() int {
		n := 0
		for name, f := range scrape(t, p, "") {
			if strings.HasPrefix(name, "toolmux_") {
				n += len(f.GetMetric())
			}
		}
		return n
	}
	round := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fx__echo", Arguments: map[string]any{"message": fmt.Sprint("m", i)}}); err != nil {
				t.Fatal(err)
			}
			resp, err := http.Post(p.url(fmt.Sprintf("/api/tools/fx/made_up_%d/call", i)), "application/json",
				strings.NewReader(fmt.Sprintf(`{"arguments": {"id": "%d"}}`, i)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	round(0, 2)
	before := series()
	round(2, 52)
	if after := series(); after != before {
		t.Errorf("50 more distinct calls grew the series from %d to %d", before, after)
	}
	wantSample(t, scrape(t, p, ""), "toolmux_calls_total", map[string]string{"server": "fx", "tool": "echo", "kind": "ok"}, 52)
}

// /metrics is behind the same token as /api; without --metrics there is
// none.
func TestServeMetricsToken(t *testing.T) {
	t.Parallel()
	const token = "metrics-test-token-0123456789"
	p := startServeProc(t, workspace(t, ""), t.TempDir(), "--metrics", "--token", token)
	resp, err := http.Get(p.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %s, want 401", resp.Status)
	}
	fams := scrape(t, p, token)
	wantSample(t, fams, "toolmux_server_state", map[string]string{"server": "builtin", "state": "ready"}, 1)

	off := startServeProc(t, workspace(t, ""), t.TempDir())
	resp, err = http.Get(off.url("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/metrics without --metrics: %s, want 404", resp.Status)
	}
}

// run --serve --metrics: the run's turns, tokens by model, its call and
// its approval are on /metrics, and the run's end once it has ended (the
// page stays up until Ctrl-C).
func TestRunServeMetrics(t *testing.T) {
	t.Parallel()
	dir := workspace(t, "")
	m := llmtest.OpenAI(t, shellThenAnswer("echo metered"))
	rp := startRun(t, dir, nil, "run", "--serve", "127.0.0.1:0", "--metrics", "--model", "scripted", "--base-url", m.BaseURL(), "Echo")
	rp.waitStderr(t, "watch the run at http://")
	match := regexp.MustCompile(`watch the run at http://([^/\s]+)/`).FindStringSubmatch(rp.stderr.String())
	if match == nil {
		t.Fatalf("no address on stderr:\n%s", rp.stderr)
	}
	p := &serveProc{addr: match[1]}
	var pending []struct{ ID string }
	if !testservers.Eventually(time.Minute, func() bool {
		pending = nil
		p.getJSON(t, "/api/approvals", &pending)
		return len(pending) == 1
	}) {
		t.Fatalf("no call waits for approval\n%s", rp.stderr)
	}
	fams := scrape(t, p, "")
	wantSample(t, fams, "toolmux_approvals_pending", nil, 1)
	// The first model call is counted (its tokens); its turn is not kept
	// until the call it asked for has ended.
	wantSample(t, fams, "toolmux_agent_input_tokens_total", map[string]string{"model": "scripted"}, 10)
	if _, ok := sample(fams, "toolmux_agent_turns_total", map[string]string{"model": "scripted"}); ok {
		t.Error("a turn counted while its call waits for approval")
	}
	resp, err := http.Post(p.url("/api/approvals/"+pending[0].ID), "application/json", strings.NewReader(`{"decision": "once"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rp.waitStderr(t, "the run has ended")
	fams = scrape(t, p, "")
	wantSample(t, fams, "toolmux_agent_runs_total", map[string]string{"state": "answered"}, 1)
	// Two turns: the call's, the answer's, as the summary line says.
	wantSample(t, fams, "toolmux_agent_turns_total", map[string]string{"model": "scripted"}, 2)
	// The scripted model reports 10×(n+1) input and 5 output tokens for
	// its nth request.
	wantSample(t, fams, "toolmux_agent_input_tokens_total", map[string]string{"model": "scripted"}, 30)
	wantSample(t, fams, "toolmux_agent_output_tokens_total", map[string]string{"model": "scripted"}, 10)
	wantSample(t, fams, "toolmux_calls_total", map[string]string{"server": "builtin", "tool": "shell", "kind": "ok"}, 1)
	wantSample(t, fams, "toolmux_approval_wait_seconds", map[string]string{"state": "executing"}, 1)
	wantSample(t, fams, "toolmux_approvals_pending", nil, 0)
	checkDocumented(t, fams)
	if err := rp.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := rp.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d\n%s", code, rp.stderr)
	}
}

// checkDocumented checks that every toolmux metric served is in
// docs/operations.md, with its labels.
func checkDocumented(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "toolmux_") {
			continue
		}
		var row string
		for line := range strings.Lines(string(doc)) {
			if strings.HasPrefix(line, "| `"+name+"` |") {
				row = line
			}
		}
		if row == "" {
			t.Errorf("%s is not in docs/operations.md", name)
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !strings.Contains(row, "`"+l.GetName()+"`") {
					t.Errorf("docs/operations.md does not give %s its label %s", name, l.GetName())
				}
			}
		}
	}
}
