// The fleet on one page (GET /api/fleet): the workers alive with their
// runs in progress and their servers' health, the queue's runs by state,
// and the runs that ended last (the gateway lists 20). Shown only on the gateway of a fleet (serve --nats or
// --nats-listen); elsewhere /api/fleet answers 404 and the tab stays
// hidden.

import {api} from './api.js';
import {h, setText, showError, fmtDuration, fmtDateTime, oneLine} from './util.js';

// POLL_MS is how often the panel reads /api/fleet while it is shown: the
// summary is a handful of KV reads on the gateway, cheap enough every
// 2 s, and workers beat every quarter of the lease anyway.
export const POLL_MS = 2000;

// READ_TIMEOUT_MS bounds one read: a gateway that does not answer (its
// NATS server gone mid-read) must not stop the polling for good.
export const READ_TIMEOUT_MS = 15000;

function readFleet() {
  return api('/api/fleet', {signal: AbortSignal.timeout(READ_TIMEOUT_MS)});
}

// COUNTS are the queue's states in the order shown, with the words the
// panel uses for them.
export const COUNTS = [
  ['queued', 'waiting'],
  ['running', 'running'],
  ['done', 'done'],
  ['failed', 'failed'],
];

// runHref is the page's address of a run: its task in the Tasks view (a
// fleet run is a task of the gateway's task log under its run id).
export function runHref(id) {
  return `#tasks/${encodeURIComponent(id)}`;
}

// uptime is how long a worker has been up, by its own clock (started and
// seen both come from the worker's heartbeats), so a skew between the
// worker's clock and the browser's does not show.
export function uptime(w) {
  const started = Date.parse(w.started);
  const seen = Date.parse(w.seen);
  if (Number.isNaN(started) || Number.isNaN(seen)) return '';
  return fmtDuration(Math.max(0, seen - started));
}

export class Fleet {
  // els: tab (the nav link), panel (the tab's section), counts, workers
  // (the table), empty, error, updated, recent (the table of the runs
  // that ended last), recentEmpty.
  constructor(els) {
    this.els = els;
    this.present = false; // the gateway answered /api/fleet with 200 once
    this.timer = 0;
    this.active = false;
    this.inflight = null;
    this.probing = null;
    this.nudgeTimer = 0;
    document.addEventListener('visibilitychange', () => this.schedule());
  }

  // probe asks the gateway whether it is a fleet's, and shows the tab if
  // it is. A 404 leaves the page as it is; other failures (the NATS
  // server unreachable: 502) mean a fleet whose summary cannot be read
  // now, which the panel says.
  probe() {
    // The stream going live and the page's start both ask: one request.
    if (!this.probing) this.probing = this.ask().finally(() => { this.probing = null; });
    return this.probing;
  }

  async ask() {
    try {
      const s = await readFleet();
      this.present = true;
      this.render(s);
      showError(this.els.error, null);
      this.stale(false);
    } catch (e) {
      if (e.status === 404 || e.status === 401 || e.status === 0) {
        // Not a fleet (or not known yet: the token dialog, an
        // unreachable gateway); probed again on a token change.
        document.documentElement.dataset.fleet = e.status === 404 ? 'absent' : 'unknown';
        return false;
      }
      this.present = true;
      showError(this.els.error, e);
      this.stale(true);
    }
    this.els.tab.hidden = false;
    document.documentElement.dataset.fleet = 'present';
    return true;
  }

  // show starts or stops polling: on while the tab is shown and the
  // browser shows the page, off otherwise.
  show(on) {
    this.active = on;
    this.schedule();
  }

  // polling reports whether the panel reads the fleet now: its tab is
  // shown, the browser shows the page, and the gateway is a fleet's.
  polling() {
    return this.active && this.present && document.visibilityState !== 'hidden';
  }

  schedule() {
    clearTimeout(this.timer);
    this.timer = 0;
    clearTimeout(this.nudgeTimer);
    this.nudgeTimer = 0;
    // For a person and the tests: whether the panel polls.
    if (this.els.panel) this.els.panel.dataset.polling = this.polling() ? 'on' : 'off';
    if (!this.polling()) return;
    this.refresh();
  }

  // nudge reads the fleet soon, not at the next poll: a run's workflow
  // started or ended (its events come through the page's stream), so the
  // counts moved. Bursts of runs make one read.
  nudge() {
    if (!this.polling() || this.nudgeTimer) return;
    this.nudgeTimer = setTimeout(() => {
      this.nudgeTimer = 0;
      if (this.polling()) this.refresh();
    }, 250);
  }

  // refresh reads /api/fleet once and polls again POLL_MS after the
  // answer (not on a fixed beat: a slow gateway is not asked twice at
  // once).
  async refresh() {
    if (!this.inflight) {
      this.inflight = (async () => {
        try {
          this.render(await readFleet());
          showError(this.els.error, null);
          this.stale(false);
        } catch (e) {
          showError(this.els.error, e);
          // What the panel shows is the last answer: dimmed, with its
          // time, under the error.
          this.stale(true);
        }
      })();
      await this.inflight;
      this.inflight = null;
    } else {
      await this.inflight;
    }
    clearTimeout(this.timer);
    this.timer = 0;
    if (this.polling()) this.timer = setTimeout(() => this.refresh(), POLL_MS);
  }

  stale(on) {
    if (this.els.panel) this.els.panel.classList.toggle('stale', on);
  }

  render(s) {
    const els = this.els;
    const runs = (s && s.runs) || {};
    for (const [state, label] of COUNTS) {
      let tile = els.counts.querySelector(`[data-state="${state}"]`);
      if (!tile) {
        tile = h('div', {class: `tile state-${state}`, dataset: {state}},
          h('span', {class: 'n'}), h('span', {class: 'label', text: label}));
        els.counts.append(tile);
      }
      const n = Number(runs[state] ?? 0);
      setText(tile.querySelector('.n'), String(n));
      // A state with no run is grey: a red 0 under "failed" alarms nobody
      // usefully.
      tile.classList.toggle('zero', n === 0);
    }
    const workers = Array.isArray(s && s.workers) ? [...s.workers] : [];
    workers.sort((a, b) => String(a.name).localeCompare(String(b.name)));
    els.workers.tBodies[0].replaceChildren(...workers.map((w) => this.row(w)));
    els.empty.hidden = workers.length > 0;
    setText(els.count, String(workers.length));
    const recent = Array.isArray(s && s.recent) ? s.recent : [];
    els.recent.tBodies[0].replaceChildren(...recent.map((r) => this.recentRow(r)));
    els.recentEmpty.hidden = recent.length > 0;
    setText(els.updated, `updated ${fmtDateTime(new Date())}`);
  }

  // recentRow is one ended run: its id (a link to its task), state,
  // worker, duration (by the worker's clock), when it ended, and for a
  // failed run its error, kind first.
  recentRow(r) {
    const error = r.error_kind || r.error ? `${r.error_kind || 'error'}: ${r.error || ''}` : '';
    return h('tr', {dataset: {run: r.id, state: r.status}},
      h('td', {}, h('a', {class: 'mono run', href: runHref(r.id), text: r.id, title: `Run ${r.id}: its task, calls and events`})),
      h('td', {}, h('span', {class: `badge state-${r.status}`, text: r.status})),
      h('td', {class: 'mono', text: r.worker || ''}),
      h('td', {class: 'num', text: r.started ? fmtDuration(r.duration_ms) : ''}),
      h('td', {class: 'num', text: r.ended ? fmtDateTime(r.ended) : ''}),
      h('td', {class: 'error', text: oneLine(error, 200), title: error}));
  }

  row(w) {
    const running = Array.isArray(w.running) ? w.running : [];
    const servers = Object.entries(w.servers || {}).sort(([a], [b]) => a.localeCompare(b));
    const seen = Date.parse(w.seen);
    return h('tr', {dataset: {worker: w.name}},
      h('td', {}, h('div', {class: 'mono name', text: w.name})),
      h('td', {text: w.host || ''}),
      h('td', {class: 'num', text: w.pid ? String(w.pid) : ''}),
      h('td', {}, h('div', {class: 'runs'},
        h('span', {class: 'load', text: `${running.length} / ${w.concurrency || 1}`, title: 'runs in progress / runs at once (--concurrency)'}),
        ...running.map((id) => h('a', {class: 'mono run', href: runHref(id), text: id, title: `Run ${id}: its task, calls and events`, dataset: {run: id}})))),
      h('td', {class: 'num', text: uptime(w), title: Number.isNaN(seen) ? '' : `started ${fmtDateTime(w.started)}, last heartbeat ${fmtDateTime(w.seen)}`}),
      h('td', {}, h('div', {class: 'servers'}, ...servers.map(([name, state]) => h('span', {class: 'server', dataset: {server: name, state}},
        h('span', {class: 'mono', text: name}), ' ', h('span', {class: `badge state-${state}`, text: state}))))));
  }
}
