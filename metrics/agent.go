package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolmux/toolmux/llm"
)

// maxModels bounds the model label: the names providers answer with are
// theirs, and a misbehaving one could vary them. Past this many, a new
// name counts as "other".
const maxModels = 16

// agentMetrics count agent runs, model turns, rollbacks and tokens: an
// agent.Observer (through Metrics).
type agentMetrics struct {
	runs, turns, rollbacks, input, output *prometheus.CounterVec

	mu     sync.Mutex
	models map[string]bool
}

func newAgentMetrics(reg *prometheus.Registry) *agentMetrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
		reg.MustRegister(c)
		return c
	}
	return &agentMetrics{models: map[string]bool{},
		runs:      counter("agent_runs_total", `Agent runs ended, by state: "answered", "max_turns", "loop", "context_exhausted", "failed", "cancelled".`, "state"),
		turns:     counter("agent_turns_total", "Agent turns kept (one model call and the tool calls it asked for; a rolled-back one is not a turn), sub-agents' included, by the model that answered.", "model"),
		rollbacks: counter("agent_rollbacks_total", "Agent turns dropped and retried, by the model whose turn it was.", "model"),
		input:     counter("agent_input_tokens_total", "Input tokens the models reported, by model.", "model"),
		output:    counter("agent_output_tokens_total", "Output tokens the models reported, by model.", "model"),
	}
}

// model bounds a model's name as a label value.
func (a *agentMetrics) model(name string) string {
	if name == "" {
		return "unknown"
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.models[name] {
		return name
	}
	if len(a.models) >= maxModels {
		return "other"
	}
	a.models[name] = true
	return name
}

// RunEnded implements agent.Observer.
func (m *Metrics) RunEnded(state string) { m.agent.runs.WithLabelValues(state).Inc() }

// ModelCall implements agent.Observer: every answered request's tokens
// count, a rolled-back turn's too.
func (m *Metrics) ModelCall(model string, usage llm.Usage) {
	model = m.agent.model(model)
	m.agent.input.WithLabelValues(model).Add(float64(max(usage.InputTokens, 0)))
	m.agent.output.WithLabelValues(model).Add(float64(max(usage.OutputTokens, 0)))
}

// Turn implements agent.Observer.
func (m *Metrics) Turn(model string) {
	m.agent.turns.WithLabelValues(m.agent.model(model)).Inc()
}

// Rollback implements agent.Observer.
func (m *Metrics) Rollback(model string) {
	m.agent.rollbacks.WithLabelValues(m.agent.model(model)).Inc()
}
