// Package metrics exposes a runtime's workings as Prometheus metrics: the
// collectors and the /metrics handler. It threads no counters through
// the other packages: calls and approvals are counted from the
// scheduler's events (a [Metrics] is a schedule.Sink), and everything
// else is read when scraped from the observation points the parts
// already have (the manager's health, the event hub's and the task log's
// stats, the passthrough routes' sessions, the approval queue).
//
// Each Metrics has its own registry: nothing is registered with the
// client library's global default, so two runtimes in one process (tests,
// a library user's) never collide.
//
// Label values are bounded: a server label is a configured server's name,
// a tool label a tool of the catalog (a call of any other name counts
// under tool=""), kinds and states come from fixed sets, a caller label a
// configured caller's or an API key's name, or "anonymous" or "other"
// (package ratelimit bounds them). Arguments, call ids, task ids,
// session ids and tokens' subjects are never labels.
package metrics

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/toolmux/toolmux/ratelimit"
	"github.com/toolmux/toolmux/schedule"
	"github.com/toolmux/toolmux/stream"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

// Namespace prefixes every metric's name.
const Namespace = "toolmux"

// KindOK is the kind label of a call that succeeded.
const KindOK = "ok"

// durationBuckets spans a built-in tool's microseconds to a slow web
// fetch's minute, in seconds.
var durationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// waitBuckets spans a person's answer: a second to the longest approval
// timeout anyone sets.
var waitBuckets = []float64{.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

// Sources are the observation points read when /metrics is scraped. Any
// may be nil: its metrics are then absent.
type Sources struct {
	// Catalog is the catalog as last built (manager.Manager.Catalog):
	// the tools a tool label may name and the servers a server label may.
	Catalog func() *tool.Catalog
	// Health is every configured server's health (manager.Manager.Health).
	Health func() []tool.ServerHealth
	// Events is the event hub's counters (stream.Hub.Stats).
	Events func() stream.Stats
	// TaskLog is the task log (its Stats and JournalStats).
	TaskLog *tasklog.Log
	// Passthrough is the passthrough routes' sessions
	// (gateway.Gateway.PassthroughSessions, converted).
	Passthrough func() []RouteSessions
	// Approvers is how many people are attached to the approval queue
	// (api.Approvals.Approvers).
	Approvers func() int
	// Reissues is how many re-issued tools/call requests the gateway
	// answered from their first execution
	// (gateway.Gateway.ReissueStats, converted).
	Reissues func() Reissues
	// Reloads is how the reloads of the configuration file went (serve's
	// reloader; absent without a file).
	Reloads func() Reloads
	// Listens is the gateway's subscriptions/listen streams
	// (gateway.Gateway.ListenStats, converted).
	Listens func() Listens
	// Callers is the tool calls admitted and refused by caller
	// (ratelimit.Limiter.Stats), under the labels the limiter bounds: a
	// caller's name only when the configuration names it or it is an
	// API key (up to a bound), "anonymous" without authentication,
	// "other" for everyone else.
	Callers func() ratelimit.Stats
}

// Reloads counts the reloads of a configuration file.
type Reloads struct {
	// Applied and Refused count reloads since the start; LastRefused says
	// the last one was refused (the configuration in use is older than
	// the file).
	Applied, Refused uint64
	LastRefused      bool
}

// Listens counts the gateway's subscriptions/listen streams
// (gateway.ListenStats without the gateway).
type Listens struct {
	// Open is how many are open now, Max their bound on the gateway.
	Open, Max int
	// Refused counts those refused for the gateway's bound,
	// RefusedPerClient those refused for a client's.
	Refused, RefusedPerClient uint64
}

// Reissues counts re-issued requests answered from their first execution
// (gateway.ReissueStats without the gateway).
type Reissues struct {
	// Answered counts them all; NotKept those whose first execution's
	// result was too large to keep, AfterGrace those whose first execution
	// was cancelled after the grace once it had reached its server (both
	// answered with outcome_unknown).
	Answered, NotKept, AfterGrace uint64
}

// RouteSessions is one passthrough route's sessions (gateway.RouteSessions
// without the gateway: this package does not depend on it).
type RouteSessions struct {
	Server  string
	Open    int
	Max     int
	Refused int64
}

// Metrics owns the collectors of one runtime and serves them. It is a
// schedule.Sink (pass it in toolmux.Options.Sinks) and an agent.Observer
// (toolmux.Options.AgentObserver). Safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	// catalog is Sources.Catalog, set by Watch; atomic, since calls may
	// end while Watch runs.
	catalog atomic.Pointer[func() *tool.Catalog]

	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	pending  prometheus.Gauge
	wait     *prometheus.HistogramVec

	agent *agentMetrics
}

// New returns the collectors of calls and approvals, with the Go
// runtime's and the process's, in a registry of their own. [Metrics.Watch]
// adds the rest.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "calls_total",
		Help: `Tool calls ended, by server, tool and outcome kind ("ok", or the error's kind: tool_error, server_unavailable, ...).`},
		[]string{"server", "tool", "kind"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "call_duration_seconds",
		Help:    "Tool calls' durations, from admission to the end (approval waits included), by server and tool.",
		Buckets: durationBuckets}, []string{"server", "tool"})
	m.pending = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "approvals_pending",
		Help: "Calls waiting now for a person's answer."})
	m.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "approval_wait_seconds",
		Help:    `How long calls waited for an answer, by the state they went on to: "executing" (approved), "error" (denied, timed out, refused), "cancelled" (withdrawn).`,
		Buckets: waitBuckets}, []string{"state"})
	m.reg.MustRegister(m.calls, m.duration, m.pending, m.wait,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.agent = newAgentMetrics(m.reg)
	return m
}

// Watch registers the metrics read from src at every scrape. Call it once,
// before serving the handler.
func (m *Metrics) Watch(src Sources) {
	if src.Catalog != nil {
		m.catalog.Store(&src.Catalog)
	}
	m.reg.MustRegister(newScraped(src))
}

// Registry is the registry the metrics are in, for a caller's own
// collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text (or OpenMetrics)
// format. It does not check a token: mount it behind the one the API has.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Event counts a call when it ends and an approval wait when it ends;
// everything else is ignored. Called on the scheduler's goroutines: a
// few map lookups and atomic adds, no allocation once a series exists.
func (m *Metrics) Event(e schedule.Event) {
	if e.Type != schedule.EventState {
		return
	}
	if e.State == schedule.AwaitingApproval {
		m.pending.Inc()
		return
	}
	if e.Previous == schedule.AwaitingApproval {
		m.pending.Dec()
		m.wait.WithLabelValues(string(e.State)).Observe(seconds(e.Time.Sub(e.PreviousAt)))
	}
	if !e.State.Terminal() {
		return
	}
	server, name := m.labels(e.Server, e.Tool)
	kind := KindOK
	if e.Record != nil && e.Record.Error != nil {
		kind = string(e.Record.Error.Kind)
	} else if e.State != schedule.Success {
		kind = string(tool.KindCancelled)
		if e.State == schedule.Error {
			kind = string(tool.KindExecutionFailed)
		}
	}
	if kind == "" {
		kind = string(tool.KindExecutionFailed)
	}
	m.calls.WithLabelValues(server, name, kind).Inc()
	if !e.FirstAt.IsZero() {
		m.duration.WithLabelValues(server, name).Observe(seconds(e.Time.Sub(e.FirstAt)))
	}
}

// labels bounds a call's server and tool to the catalog's: a tool it does
// not hold (a client's made-up name) is "", and so is a server it does
// not know. Without a catalog, both are "".
func (m *Metrics) labels(server, name string) (string, string) {
	f := m.catalog.Load()
	if f == nil {
		return "", ""
	}
	cat := (*f)()
	if cat == nil {
		return "", ""
	}
	if _, ok := cat.Find(server, name); ok {
		return server, name
	}
	if _, ok := cat.Server(server); ok {
		return server, ""
	}
	return "", ""
}

func seconds(d time.Duration) float64 { return max(d.Seconds(), 0) }
