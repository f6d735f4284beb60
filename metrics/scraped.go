package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolmux/toolmux/tool"
)

// serverStates are the values of toolmux_server_state's state label: every
// one is reported for every server, 1 for the current, so that a state
// left shows as 0 rather than vanishing.
var serverStates = []tool.State{tool.StateConnecting, tool.StateReady, tool.StateDegraded, tool.StateFailed, tool.StateDisabled}

// breakerStates are the values of toolmux_server_breaker_state's label.
var breakerStates = []string{"closed", "half-open", "open"}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(Namespace+"_"+name, help, labels, nil)
}

// scraped reads the observation points when scraped and reports what
// they say as constant metrics: it keeps no state of its own.
type scraped struct {
	src Sources

	serverState, serverRestarts, serverBreaker, serverTools *prometheus.Desc

	passOpen, passMax, passRefused *prometheus.Desc

	evPublished, evSubscribers, evDropped, evQueued, evPersistDropped, evPersistFailed *prometheus.Desc

	logRecorded, logRetried, logLost, journalBytes, journalSegments, indexLag *prometheus.Desc

	approvers *prometheus.Desc

	reissued, reissuedNotKept, reissuedAfterGrace *prometheus.Desc

	reloads, reloadOK *prometheus.Desc

	listens, listensMax, listensRefused *prometheus.Desc

	callerCalls, rateLimited *prometheus.Desc
}

func newScraped(src Sources) *scraped {
	return &scraped{src: src,
		serverState:      desc("server_state", "1 for the state each configured server is in (connecting, ready, degraded, failed, disabled), 0 for the others.", "server", "state"),
		serverRestarts:   desc("server_restarts_total", "Times each server was restarted (crash, lost session, wedge).", "server"),
		serverBreaker:    desc("server_breaker_state", "1 for the state each server's circuit breaker is in (closed, half-open, open), 0 for the others; absent for a server without a breaker.", "server", "state"),
		serverTools:      desc("server_tools", "Tools each server offers (after allow/deny).", "server"),
		passOpen:         desc("passthrough_sessions", "Upstream sessions each passthrough route holds now.", "server"),
		passMax:          desc("passthrough_sessions_max", "The most sessions each passthrough route holds (max_sessions).", "server"),
		passRefused:      desc("passthrough_sessions_refused_total", "Client sessions each passthrough route refused for its limit.", "server"),
		evPublished:      desc("events_published_total", "Events published on the event hub."),
		evSubscribers:    desc("event_subscribers", "Subscriptions to the event hub open now (/api/events streams, the page)."),
		evDropped:        desc("events_dropped_total", "Events subscribers lost because their buffer was full (each loss is a gap marker on their stream)."),
		evQueued:         desc("events_persist_queued", "Events waiting now to be written to the task log."),
		evPersistDropped: desc("events_persist_dropped_total", "Events never written to the task log: its queue was full, or shutdown gave up waiting."),
		evPersistFailed:  desc("events_persist_failed_total", "Events in batches the task log refused."),
		logRecorded:      desc("tasklog_records_total", "Call records stored in the task log by this process."),
		logRetried:       desc("tasklog_records_retried_total", "Call records that needed a second attempt."),
		logLost:          desc("tasklog_records_lost_total", "Call records that could not be stored (each is logged)."),
		journalBytes:     desc("tasklog_journal_bytes", "Size of the task log's journal segment files."),
		journalSegments:  desc("tasklog_journal_segments", "Segment files of the task log's journal."),
		indexLag:         desc("tasklog_index_lag_bytes", "Bytes of the journal this process has not indexed yet."),
		approvers:        desc("approvers", "People attached to the approval queue now (web pages open with ?approver=1)."),
		reissued:         desc("reissued_requests_total", "Re-issued tools/call requests answered from their first execution instead of running again."),
		reissuedNotKept:  desc("reissued_requests_not_kept_total", "Re-issued requests whose first execution's result was too large to keep (answered with outcome_unknown)."),
		reissuedAfterGrace: desc("reissued_requests_after_grace_total",
			"Re-issued requests whose first execution was cancelled after the grace once it had reached its server (answered with outcome_unknown)."),
		reloads:        desc("config_reloads_total", "Reloads of the configuration file, by result: applied, or refused (the configuration in use stayed).", "result"),
		reloadOK:       desc("config_last_reload_successful", "1 unless the last reload of the configuration file was refused."),
		listens:        desc("listen_streams", "subscriptions/listen streams open now, every route together."),
		listensMax:     desc("listen_streams_max", "The most subscriptions/listen streams the gateway holds (subscriptions.max_listens)."),
		listensRefused: desc("listen_streams_refused_total", "subscriptions/listen streams refused, by the bound that refused them: gateway (subscriptions.max_listens) or client (subscriptions.max_listens_per_client).", "limit"),
		callerCalls:    desc("caller_calls_total", `Tool calls admitted, by caller: a configured caller's or an API key's name, "anonymous" without authentication, "other" for everyone else.`, "caller"),
		rateLimited: desc("rate_limited_total", `Tool calls refused for a limit (rate_limits), by caller, the group whose budget refused them ("" for the caller's own limit) and the limit: calls_per_minute, concurrent, burst, max_callers.`,
			"caller", "group", "limit"),
	}
}

// Describe implements prometheus.Collector.
func (s *scraped) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.serverState, s.serverRestarts, s.serverBreaker, s.serverTools,
		s.passOpen, s.passMax, s.passRefused,
		s.evPublished, s.evSubscribers, s.evDropped, s.evQueued, s.evPersistDropped, s.evPersistFailed,
		s.logRecorded, s.logRetried, s.logLost, s.journalBytes, s.journalSegments, s.indexLag, s.approvers,
		s.reissued, s.reissuedNotKept, s.reissuedAfterGrace, s.reloads, s.reloadOK, s.listens, s.listensMax, s.listensRefused,
		s.callerCalls, s.rateLimited} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *scraped) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	if s.src.Health != nil {
		for _, h := range s.src.Health() {
			for _, st := range serverStates {
				gauge(s.serverState, b2f(h.State == st), h.Name, string(st))
			}
			counter(s.serverRestarts, float64(h.Restarts), h.Name)
			gauge(s.serverTools, float64(h.Tools), h.Name)
			if h.Breaker != "" {
				for _, st := range breakerStates {
					gauge(s.serverBreaker, b2f(h.Breaker == st), h.Name, st)
				}
			}
		}
	}
	if s.src.Passthrough != nil {
		for _, rs := range s.src.Passthrough() {
			gauge(s.passOpen, float64(rs.Open), rs.Server)
			gauge(s.passMax, float64(rs.Max), rs.Server)
			counter(s.passRefused, float64(rs.Refused), rs.Server)
		}
	}
	if s.src.Events != nil {
		st := s.src.Events()
		counter(s.evPublished, float64(st.Published))
		gauge(s.evSubscribers, float64(st.Subscribers))
		counter(s.evDropped, float64(st.Dropped))
		gauge(s.evQueued, float64(st.PersistQueued))
		counter(s.evPersistDropped, float64(st.PersistDropped))
		counter(s.evPersistFailed, float64(st.PersistFailed))
	}
	if l := s.src.TaskLog; l != nil {
		st := l.Stats()
		counter(s.logRecorded, float64(st.Recorded))
		counter(s.logRetried, float64(st.Retried))
		counter(s.logLost, float64(st.Lost))
		// A journal that cannot be read now is left out of this scrape
		// (absent, not 0): Prometheus shows the gap.
		if js, ok, err := l.JournalStats(); ok && err == nil {
			gauge(s.journalBytes, float64(js.Bytes))
			gauge(s.journalSegments, float64(js.Segments))
			gauge(s.indexLag, float64(js.IndexLagBytes))
		}
	}
	if s.src.Approvers != nil {
		gauge(s.approvers, float64(s.src.Approvers()))
	}
	if s.src.Reissues != nil {
		r := s.src.Reissues()
		counter(s.reissued, float64(r.Answered))
		counter(s.reissuedNotKept, float64(r.NotKept))
		counter(s.reissuedAfterGrace, float64(r.AfterGrace))
	}
	if s.src.Reloads != nil {
		r := s.src.Reloads()
		counter(s.reloads, float64(r.Applied), "applied")
		counter(s.reloads, float64(r.Refused), "refused")
		gauge(s.reloadOK, b2f(!r.LastRefused))
	}
	if s.src.Listens != nil {
		l := s.src.Listens()
		gauge(s.listens, float64(l.Open))
		gauge(s.listensMax, float64(l.Max))
		// Two values of the label, whatever the clients: bounded.
		counter(s.listensRefused, float64(l.Refused), "gateway")
		counter(s.listensRefused, float64(l.RefusedPerClient), "client")
	}
	if s.src.Callers != nil {
		c := s.src.Callers()
		for _, n := range c.Calls {
			counter(s.callerCalls, float64(n.Calls), n.Caller)
		}
		for _, r := range c.Refused {
			counter(s.rateLimited, float64(r.Count), r.Caller, r.Group, r.Limit)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
