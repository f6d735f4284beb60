// Past tasks from the task log (GET /api/tasks) and one task with its
// steps, message histories and calls (GET /api/tasks/{id}).

import {api} from './api.js';
import {h, fmtDateTime, fmtDuration, showError, truncate, prettyJSON} from './util.js';
import {renderRecord, recordOutcome} from './record.js';

export class Tasks {
  // onFollow(id), when given, is what "Follow live" on a running task does.
  constructor({table, empty, error, detail, status, refresh, onFollow}) {
    this.table = table;
    this.emptyEl = empty;
    this.errorEl = error;
    this.detail = detail;
    this.statusEl = status;
    this.onFollow = onFollow;
    this.selected = '';
    // The status of the open task as last read ('' until it is read):
    // a running task is read again as its events arrive.
    this.openStatus = '';
    this.endRetries = 0;
    this.endTimer = 0;
    status.addEventListener('change', () => this.refresh());
    refresh.addEventListener('click', () => this.refresh());
  }

  // refresh reads the list again, and the open task unless detail is
  // false (the list follows the stream; the task a person reads does not
  // change under them).
  async refresh({detail = true} = {}) {
    const q = new URLSearchParams({limit: '100'});
    if (this.statusEl.value) q.set('status', this.statusEl.value);
    let list;
    try {
      list = await api(`/api/tasks?${q}`);
      showError(this.errorEl, null);
    } catch (e) {
      showError(this.errorEl, e);
      return;
    }
    list = Array.isArray(list) ? list : [];
    this.emptyEl.hidden = list.length > 0;
    const body = this.table.tBodies[0];
    body.replaceChildren(...list.map((t) => {
      const end = t.ended_at ? Date.parse(t.ended_at) : NaN;
      const dur = Number.isNaN(end) ? '–' : fmtDuration(end - Date.parse(t.created_at));
      const row = h('tr', {tabIndex: 0, dataset: {task: t.id}, class: t.id === this.selected ? 'selected' : '',
        on: {
          click: () => this.pick(t.id),
          keydown: (e) => { if (e.key === 'Enter') this.pick(t.id); },
        }},
      h('td', {}, h('div', {class: 'mono', text: truncate(t.id, 40), title: t.id}), t.input ? h('div', {class: 'muted', text: truncate(t.input, 80)}) : null),
      h('td', {}, h('span', {class: `badge task-${t.status}`, text: t.status})),
      h('td', {class: 'caller', text: t.caller ? t.caller.name : '–', title: t.caller ? t.caller.key : 'no caller (no authentication)'}),
      h('td', {class: 'when', text: fmtDateTime(t.created_at)}),
      h('td', {class: 'num', text: dur}),
      h('td', {class: 'num', text: String(t.calls ?? '')}),
      h('td', {class: `num${t.errors ? ' bad' : ''}`, text: String(t.errors ?? '')}));
      return row;
    }));
    if (this.selected && detail) await this.open(this.selected, {quiet: true});
  }

  // pick opens a task of the list, and puts it in the address (without a
  // new history entry), so that a reload or a copied link opens it again.
  pick(id) {
    history.replaceState(null, '', `#tasks/${encodeURIComponent(id)}`);
    this.open(id);
  }

  // show opens the task id (a link to #tasks/ID: a run of the fleet
  // panel) and reads the list.
  async show(id) {
    if (id !== this.selected || !this.openStatus) {
      this.selected = id;
      this.openStatus = '';
      this.detail.replaceChildren(h('p', {class: 'muted', text: 'Loading…'}));
    }
    await this.refresh();
  }

  // followsOpen reports whether an event of task id should read the open
  // task again: it is the open one, and it runs (or could not be read
  // yet: a fleet run reaches the gateway's index a moment after its
  // first events).
  followsOpen(id) {
    return !!id && id === this.selected && (this.openStatus === 'running' || this.openStatus === '');
  }

  // refreshOpen reads the open task again, keeping what the person
  // opened in it, and the list when its status changed. ended says the
  // stream has told the task's end: while the answer still says running
  // (an index that has not caught up with the journal yet), it is read
  // again, a few times, a second apart.
  async refreshOpen({ended = false} = {}) {
    if (!this.selected) return;
    const id = this.selected;
    const before = this.openStatus;
    await this.open(id, {quiet: true, keep: true});
    if (id !== this.selected) return;
    if (before !== this.openStatus) await this.refresh({detail: false});
    if (ended) this.endRetries = 5;
    if (this.openStatus === 'running' && this.endRetries > 0) {
      this.endRetries--;
      clearTimeout(this.endTimer);
      this.endTimer = setTimeout(() => this.refreshOpen(), 1000);
    }
  }

  async open(id, {quiet = false, keep = false} = {}) {
    if (id !== this.selected) {
      this.openStatus = '';
      this.endRetries = 0;
    }
    this.selected = id;
    for (const r of this.table.tBodies[0].rows) r.classList.toggle('selected', r.dataset.task === id);
    if (!quiet) this.detail.replaceChildren(h('p', {class: 'muted', text: 'Loading…'}));
    let t;
    try {
      t = await api(`/api/tasks/${encodeURIComponent(id)}`);
    } catch (e) {
      if (id !== this.selected) return;
      this.openStatus = '';
      this.detail.replaceChildren(h('div', {class: 'error-box'}, h('strong', {class: 'kind', text: e.kind}), ' ', e.message));
      return;
    }
    // A slower answer for a task no longer open is dropped.
    if (id !== this.selected) return;
    const wasOpen = keep && this.detail.dataset.task === id
      ? new Set([...this.detail.querySelectorAll('details')].map((d, i) => (d.open ? i : -1)).filter((i) => i >= 0)) : new Set();
    this.openStatus = t.status || '';
    const parts = [
      h('h2', {}, 'Task ', h('span', {class: 'mono', text: t.id}),
        t.status === 'running' && this.onFollow ? h('button', {type: 'button', class: 'btn small follow', text: 'Follow live',
          title: 'Show this task\'s rows in the Live view as they happen', on: {click: () => this.onFollow(t.id)}}) : null),
      h('div', {class: 'kvs'},
        kv('status', t.status), kv('caller', t.caller ? t.caller.name : ''), kv('started', fmtDateTime(t.created_at)),
        kv('ended', t.ended_at ? fmtDateTime(t.ended_at) : ''),
        kv('calls', (t.calls || []).length)),
    ];
    if (t.input) parts.push(h('div', {class: 'section'}, h('h4', {text: 'Input'}), h('pre', {text: t.input})));
    if (t.final_answer) parts.push(h('div', {class: 'section'}, h('h4', {text: 'Final answer'}), h('pre', {text: t.final_answer})));
    if (t.steps && t.steps.length) {
      parts.push(h('div', {class: 'section'}, h('h4', {text: `Steps (${t.steps.length})`}),
        h('ol', {class: 'steps'}, ...t.steps.map((s) => h('li', {class: `level-${s.level}`},
          h('span', {class: 'muted', text: fmtDateTime(s.time)}), ' ', h('strong', {text: s.name}), ' ', s.message || '')))));
    }
    for (const sh of t.sessions || []) {
      parts.push(h('details', {class: 'section'}, h('summary', {text: `Messages of ${sh.session || 'the main agent'} (${(sh.messages || []).length})`}),
        ...(sh.messages || []).map((m) => h('div', {class: `msg role-${m.role}`}, h('span', {class: 'tag', text: m.role}),
          h('pre', {text: typeof m.content === 'string' ? m.content : prettyJSON(m.content)})))));
    }
    const calls = t.calls || [];
    if (calls.length) {
      parts.push(h('h3', {text: `Calls (${calls.length})`}));
      parts.push(...nestCalls(calls).map((c) => callDetails(c)));
    } else {
      parts.push(h('p', {class: 'muted', text: 'No calls.'}));
    }
    this.detail.replaceChildren(...parts);
    this.detail.dataset.task = t.id;
    this.detail.dataset.status = t.status || '';
    this.detail.querySelectorAll('details').forEach((d, i) => { if (wasOpen.has(i)) d.open = true; });
  }
}

// nestCalls puts the calls a program made (their record names its
// run_code call as their parent) under the program's record; a program
// whose own record is not there yet (it runs: a program is recorded when
// it ends) stands as a placeholder holding its calls so far.
function nestCalls(calls) {
  const ids = new Set(calls.map((rec) => rec.id));
  const nodes = new Map();
  const top = [];
  const node = (id) => {
    if (!nodes.has(id)) nodes.set(id, {rec: null, id, children: []});
    return nodes.get(id);
  };
  for (const rec of calls) {
    if (rec.parent && rec.parent !== rec.id) {
      const parent = node(rec.parent);
      if (!ids.has(rec.parent) && !top.includes(parent)) top.push(parent);
      parent.children.push(rec);
      continue;
    }
    const n = node(rec.id || `#${top.length}`);
    n.rec = rec;
    top.push(n);
  }
  return top;
}

// callDetails is one call, its record shown when opened; a program's
// with its calls underneath.
function callDetails({rec, id, children = []}) {
  const outcome = rec ? recordOutcome(rec) : 'running';
  const state = outcome === 'success' ? 'success' : outcome === 'running' ? 'running' : 'error';
  const name = rec ? rec.name || `${rec.server}__${rec.tool}` : 'run_code';
  const when = rec ? `${fmtDuration(rec.duration_ms)} · ${fmtDateTime(rec.started_at)}` : 'not recorded yet: it has not ended';
  const d = h('details', {class: 'call', dataset: {callId: id || ''}},
    h('summary', {},
      h('span', {class: `badge state-${state}`, text: outcome}), ' ',
      h('span', {class: 'mono', text: name}), ' ',
      children.length ? h('span', {class: 'tag', text: `program · ${children.length} call${children.length === 1 ? '' : 's'}`}) : null, ' ',
      h('span', {class: 'muted', text: when})));
  let shown = false;
  d.addEventListener('toggle', () => {
    if (!d.open || shown || !rec) return;
    shown = true;
    d.insertBefore(renderRecord(rec), d.children[1] || null);
  });
  if (children.length) {
    d.append(h('div', {class: 'program-calls', dataset: {parent: id}},
      h('h4', {text: `Calls of the program (${children.length})`}),
      ...children.map((c) => callDetails({rec: c, id: c.id}))));
  }
  return d;
}

function kv(k, v) {
  if (v === undefined || v === null || v === '') return null;
  return h('div', {class: 'kv'}, h('span', {class: 'k', text: k}), h('span', {class: 'v', text: String(v)}));
}
