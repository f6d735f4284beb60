// The live view: what the event stream says, as rows that change in
// place. One row per tool call (grouped by call id: its states, input,
// live output, result), per workflow, agent, model turn and message, per
// error and per gap marker.
//
// It stays fast with thousands of events: an event only changes the model
// and marks its row dirty; rows are built and updated once per animation
// frame (requestAnimationFrame), never all of them; and at most MAX_ROWS
// rows stay in the page — the oldest finished ones are dropped (running
// ones never are).

import {h, setText, fmtDuration, fmtTime, compactJSON, prettyJSON, oneLine, shortID} from './util.js';

export const MAX_ROWS = 500;
const MAX_OUTPUT = 64 * 1024;   // live output kept per call (its tail)
const MAX_MESSAGE = 256 * 1024; // text kept per message
const MAX_FORGOTTEN = 20000;    // keys of dropped rows remembered, so late events do not bring back half a row

const FINAL_STATES = new Set(['success', 'error', 'cancelled']);
const STATE_LABELS = {
  requested: 'requested',
  validating: 'validating',
  scheduled: 'scheduled',
  awaiting_approval: 'awaiting approval',
  executing: 'executing',
  success: 'success',
  error: 'error',
  cancelled: 'cancelled',
  running: 'running',
  done: 'done',
  failed: 'failed',
  thinking: 'thinking',
  message: 'message',
  gap: 'gap',
};

function splitName(name) {
  const i = name ? name.indexOf('__') : -1;
  return i > 0 ? [name.slice(0, i), name.slice(i + 2)] : ['', name || ''];
}

function parseTime(s) {
  const d = new Date(s);
  return Number.isNaN(d.getTime()) ? new Date() : d;
}

// Entity is one row's worth of model.
class Entity {
  constructor(kind, key, seq, env) {
    this.kind = kind;
    this.key = key;
    this.seq = seq;
    this.task = env.task || '';
    this.first = parseTime(env.time);
    this.end = null;
    this.state = '';
    this.finished = false;
    this.el = null;
    this.open = false;
    this.dropped = false;
    this.search = '';
  }
}

export class Live {
  // rows: the container; stats, empty, capped: elements of the panel;
  // onLoadRange(from, to) replays a range of events (a gap's).
  constructor({rows, stats, empty, capped, onLoadRange, onFilterTask}) {
    this.rowsEl = rows;
    this.statsEl = stats;
    this.emptyEl = empty;
    this.cappedEl = capped;
    this.onLoadRange = onLoadRange;
    this.onFilterTask = onFilterTask;
    this.filterText = '';
    this.filterKind = '';
    this.reset();
    setInterval(() => this.tick(), 1000);
  }

  reset() {
    this.entities = new Map(); // key → Entity
    this.forgotten = new Map(); // key → true, insertion ordered
    this.order = [];          // entities with a row (or about to get one), by seq ascending
    this.pendingNew = [];
    this.dirty = new Set();
    this.openLLM = new Map(); // task|agent → Entity of the turn in progress
    this.events = 0;
    this.maxId = 0;
    this.minId = 0;
    this.serverLastId = 0;
    this.calls = {ok: 0, failed: 0};
    this.gaps = {count: 0, missed: 0};
    this.droppedRows = 0;
    // What the page knows of its clock against the gateway's (local
    // minus the gateway's): skewHi, the least upper bound (every event
    // was stamped before it arrived), skewLo, the greatest lower bound
    // (the Date of the stream's answer, stamped after it was asked).
    this.skewHi = Infinity;
    this.skewLo = -Infinity;
    this.rafPending = false;
    this.rowsEl.replaceChildren();
    this.schedule();
  }

  // clear drops every finished row, keeping what still runs.
  clear() {
    for (const e of this.order) {
      if (e.finished) this.drop(e);
    }
    this.order = this.order.filter((e) => !e.dropped);
    this.droppedRows = 0;
    this.schedule();
  }

  setFilter(text, kind) {
    this.filterText = (text || '').trim().toLowerCase();
    this.filterKind = kind || '';
    for (const e of this.order) {
      if (e.el) e.el.hidden = !this.matches(e);
    }
    this.updatePanel();
  }

  // handle applies one envelope; replayed says it comes from a range read
  // (a gap's or earlier events), not the standing stream.
  handle(env, {replayed = false} = {}) {
    if (typeof env.id === 'number' && env.id > 0) {
      if (!replayed) this.events++;
      if (env.id > this.maxId) this.maxId = env.id;
      if (!this.minId || env.id < this.minId) this.minId = env.id;
      if (env.id > this.serverLastId) this.serverLastId = env.id;
    }
    if (env.time) {
      // An upper bound only: an event replayed on resumption (a page
      // opened late) arrives long after its time, and taking that delay
      // for the clocks' difference made what waited 11 s show 3 s.
      const s = Date.now() - Date.parse(env.time);
      if (s < this.skewHi) this.skewHi = s;
    }
    const d = env.data || {};
    switch (env.event) {
      case 'tool_state': this.toolState(env, d); break;
      case 'tool_call': this.toolCall(env, d); break;
      case 'tool_output': this.toolOutput(env, d); break;
      case 'approval_request': this.approvalRequest(env, d); break;
      case 'approval_resolved': this.approvalResolved(env, d); break;
      case 'start_of_workflow': this.startWorkflow(env, d); break;
      case 'end_of_workflow': this.endWorkflow(env, d); break;
      case 'start_of_agent': this.startAgent(env, d); break;
      case 'end_of_agent': this.endAgent(env, d); break;
      case 'start_of_llm': this.startLLM(env, d); break;
      case 'end_of_llm': this.endLLM(env, d); break;
      case 'message': this.message(env, d); break;
      case 'show_error': this.showError(env, d); break;
      case 'gap': this.gap(env, d); break;
      case 'heartbeat':
        if (d.last_event_id > this.serverLastId) this.serverLastId = d.last_event_id;
        break;
      default: break; // an event this page does not know: ignored
    }
    this.schedule();
  }

  // get returns the entity of key, making it (seq: the event's id) unless
  // its row was dropped: late events of a dropped row are ignored.
  get(kind, key, env, create = true) {
    let e = this.entities.get(key);
    if (e || !create || this.forgotten.has(key)) return e || null;
    const seq = typeof env.id === 'number' && env.id > 0 ? env.id : this.maxId + 0.5;
    e = new Entity(kind, key, seq, env);
    this.entities.set(key, e);
    this.pendingNew.push(e);
    return e;
  }

  touch(e) {
    if (e) this.dirty.add(e);
  }

  // --- tool calls -------------------------------------------------------

  call(env, id, create = true) {
    const e = this.get('call', `call|${id}`, env, create);
    if (e && !e.callId) {
      e.callId = id;
      e.states = [];
      e.out = [];
      e.outBytes = 0;
      e.state = 'requested';
    }
    return e;
  }

  toolState(env, d) {
    const e = this.call(env, d.call_id);
    if (!e) return;
    e.server = d.server || e.server;
    e.tool = d.tool || e.tool;
    if (d.caller) e.caller = d.caller; // who made the call (with authentication)
    if (d.batch) { e.batch = d.batch; e.index = d.index; }
    if (env.task) e.task = env.task;
    if (e.states.some((s) => s.id === env.id)) return;
    const st = {id: env.id, state: d.state, time: parseTime(env.time), prevMs: d.previous_ms, totalMs: d.total_ms, message: d.message, kind: d.kind};
    let i = e.states.length;
    while (i > 0 && e.states[i - 1].id > env.id) i--;
    e.states.splice(i, 0, st);
    const last = e.states[e.states.length - 1];
    const wasFinal = e.finished;
    e.state = last.state;
    e.totalMs = last.totalMs;
    e.stateTime = last.time;
    if (last.state === 'error' || last.state === 'cancelled') {
      e.errKind = last.kind || e.errKind || last.state;
      e.errMsg = last.message || e.errMsg;
    }
    e.finished = FINAL_STATES.has(last.state);
    if (e.finished) e.end = last.time;
    if (e.finished && !wasFinal) {
      if (last.state === 'success') this.calls.ok++;
      else this.calls.failed++;
    }
    this.touch(e);
  }

  toolCall(env, d) {
    const e = this.call(env, d.tool_call_id);
    if (!e) return;
    if (d.tool_name) {
      e.name = d.tool_name;
      if (!e.server) [e.server, e.tool] = splitName(d.tool_name);
    }
    if (env.task) e.task = env.task;
    const input = d.tool_input;
    if (d.delta_input && typeof d.delta_input === 'object') {
      e.args = {...(e.args || {}), ...d.delta_input};
    } else if (input && typeof input === 'object') {
      // The second tool_call of a call carries the result, as
      // {"result": text}; the first, the arguments.
      const keys = Object.keys(input);
      const isResult = keys.length === 1 && keys[0] === 'result' && (e.finished || e.args !== undefined);
      if (isResult) e.result = typeof input.result === 'string' ? input.result : prettyJSON(input.result);
      else e.args = input;
    }
    this.touch(e);
  }

  toolOutput(env, d) {
    const e = this.call(env, d.call_id);
    if (!e) return;
    e.server = d.server || e.server;
    e.tool = d.tool || e.tool;
    if (d.progress) {
      e.progress = d.progress;
    } else if (d.stream === 'pid') {
      e.pid = d.chunk;
    } else if (typeof d.chunk === 'string') {
      const piece = {id: env.id, stream: d.stream, chunk: d.chunk};
      let i = e.out.length;
      while (i > 0 && e.out[i - 1].id > env.id) i--;
      if (i > 0 && e.out[i - 1].id === env.id) return;
      e.out.splice(i, 0, piece);
      e.outBytes += d.chunk.length;
      while (e.outBytes > MAX_OUTPUT && e.out.length > 1) {
        e.outBytes -= e.out.shift().chunk.length;
        e.outCut = true;
      }
    }
    this.touch(e);
  }

  approvalRequest(env, d) {
    const e = this.call(env, d.call_id);
    if (!e) return;
    e.server = d.server || e.server;
    e.tool = d.tool || e.tool;
    if (d.arguments && e.args === undefined) e.args = d.arguments;
    if (d.caller) e.caller = d.caller;
    e.approval = {...(e.approval || {}), message: d.message, rule: d.rule, asked: parseTime(env.time), caller: d.caller};
    this.touch(e);
  }

  approvalResolved(env, d) {
    const e = this.call(env, d.call_id);
    if (!e) return;
    e.approval = {...(e.approval || {}), outcome: d.outcome, waitedMs: d.waited_ms, answer: d.message,
      caller: d.caller || (e.approval && e.approval.caller), by: d.answered_by};
    this.touch(e);
  }

  // --- workflows, agents, model turns, messages -------------------------

  startWorkflow(env, d) {
    const e = this.get('workflow', `wf|${env.task || ''}|${d.workflow_id}`, env);
    if (!e) return;
    e.workflowId = d.workflow_id;
    e.input = Array.isArray(d.input) ? d.input.map((m) => (typeof m.content === 'string' ? m.content : compactJSON(m.content))).join('\n') : '';
    if (!e.finished) e.state = 'running';
    this.touch(e);
  }

  endWorkflow(env, d) {
    const e = this.get('workflow', `wf|${env.task || ''}|${d.workflow_id}`, env);
    if (!e) return;
    e.workflowId = d.workflow_id;
    if (e.state !== 'failed') e.state = 'done';
    e.finished = true;
    e.end = parseTime(env.time);
    this.touch(e);
  }

  startAgent(env, d) {
    const e = this.get('agent', `agent|${env.task || ''}|${d.agent_id || d.agent_name}`, env);
    if (!e) return;
    e.agentName = d.agent_name;
    e.display = d.display_name || d.agent_name;
    e.agentId = d.agent_id;
    if (!e.finished) e.state = 'running';
    this.touch(e);
  }

  endAgent(env, d) {
    const e = this.get('agent', `agent|${env.task || ''}|${d.agent_id || d.agent_name}`, env);
    if (!e) return;
    e.agentName = d.agent_name;
    e.display = e.display || d.display_name || d.agent_name;
    e.state = 'done';
    e.finished = true;
    e.end = parseTime(env.time);
    this.touch(e);
  }

  startLLM(env, d) {
    const who = `${env.task || ''}|${d.agent_name}`;
    const e = this.get('llm', `llm|${who}|${env.id}`, env);
    if (!e) return;
    e.agentName = d.agent_name;
    e.display = d.display_name || d.agent_name;
    e.state = 'thinking';
    this.openLLM.set(who, e);
    this.touch(e);
  }

  endLLM(env, d) {
    const who = `${env.task || ''}|${d.agent_name}`;
    const e = this.openLLM.get(who);
    if (!e) return;
    this.openLLM.delete(who);
    e.state = 'done';
    e.finished = true;
    e.end = parseTime(env.time);
    this.touch(e);
  }

  message(env, d) {
    const e = this.get('message', `msg|${env.task || ''}|${d.message_id}`, env);
    if (!e) return;
    if (!e.pieces) {
      e.pieces = [];
      e.state = 'message';
      e.finished = true;
      e.length = 0;
    }
    const text = d.delta && typeof d.delta.content === 'string' ? d.delta.content : '';
    if (e.length < MAX_MESSAGE) {
      let i = e.pieces.length;
      while (i > 0 && e.pieces[i - 1].id > env.id) i--;
      e.pieces.splice(i, 0, {id: env.id, text});
      e.length += text.length;
      e.content = null; // joined again when shown
    }
    e.end = parseTime(env.time);
    this.touch(e);
  }

  showError(env, d) {
    const e = this.get('error', `err|${env.id || this.maxId + 0.5}`, env);
    if (!e) return;
    e.state = 'error';
    e.finished = true;
    e.error = typeof d.error === 'string' ? d.error : compactJSON(d.error, 2000);
    // The error ends the workflow of its task.
    for (const w of this.entities.values()) {
      if (w.kind === 'workflow' && w.task === e.task && !w.finished) {
        w.state = 'failed';
        w.finished = true;
        w.end = parseTime(env.time);
        this.touch(w);
      }
    }
    this.touch(e);
  }

  gap(env, d) {
    const e = this.get('gap', `gap|${d.from_id}|${d.to_id}|${this.maxId}`, env);
    if (!e) return;
    e.state = 'gap';
    e.finished = true;
    e.missed = d.missed || 0;
    e.from = d.from_id;
    e.to = d.to_id;
    e.reason = d.reason || '';
    e.error = d.error || '';
    this.gaps.count++;
    this.gaps.missed += e.missed;
    this.touch(e);
  }

  // --- rendering --------------------------------------------------------

  schedule() {
    if (this.rafPending) return;
    this.rafPending = true;
    requestAnimationFrame(() => this.flush());
  }

  // flush builds the new rows, updates the dirty ones, and drops the
  // oldest finished rows beyond MAX_ROWS: work proportional to what
  // changed since the last frame.
  flush() {
    this.rafPending = false;
    if (this.pendingNew.length) {
      const news = this.pendingNew.filter((e) => !e.dropped);
      this.pendingNew = [];
      news.sort((a, b) => a.seq - b.seq);
      const top = [];
      for (const e of news) {
        this.build(e);
        const last = this.order[this.order.length - 1];
        if (!last || e.seq > last.seq) {
          this.order.push(e);
          top.push(e);
          continue;
        }
        // An older event (a replayed range): its row goes in its place.
        let lo = 0;
        let hi = this.order.length;
        while (lo < hi) {
          const mid = (lo + hi) >> 1;
          if (this.order[mid].seq < e.seq) lo = mid + 1;
          else hi = mid;
        }
        const older = lo > 0 ? this.order[lo - 1] : null;
        this.order.splice(lo, 0, e);
        this.rowsEl.insertBefore(e.el, older ? older.el : null);
      }
      if (top.length) {
        const frag = document.createDocumentFragment();
        for (let i = top.length - 1; i >= 0; i--) frag.append(top[i].el);
        this.rowsEl.prepend(frag);
      }
    }
    for (const e of this.dirty) {
      if (e.el && !e.dropped) this.render(e);
    }
    this.dirty.clear();
    this.evict();
    this.updatePanel();
  }

  evict() {
    let excess = this.order.length - MAX_ROWS;
    if (excess <= 0) return;
    // Rows that still run are kept, unless there are so many (calls whose
    // end was lost in a gap) that they would break the bound themselves.
    const all = this.order.length > 2 * MAX_ROWS;
    const kept = [];
    for (const e of this.order) {
      if (excess > 0 && (all || (e.finished && !e.open))) {
        this.drop(e);
        this.droppedRows++;
        excess--;
      } else {
        kept.push(e);
      }
    }
    this.order = kept;
  }

  drop(e) {
    e.dropped = true;
    if (e.el) e.el.remove();
    e.el = null;
    this.entities.delete(e.key);
    this.forgotten.set(e.key, true);
    if (this.forgotten.size > MAX_FORGOTTEN) {
      this.forgotten.delete(this.forgotten.keys().next().value);
    }
  }

  updatePanel() {
    let running = 0;
    for (const e of this.order) if (e.kind === 'call' && !e.finished) running++;
    const parts = [
      `${this.events.toLocaleString()} events`,
      this.maxId ? `last id ${this.maxId}` : '',
      `${running} running`,
      `${this.calls.ok.toLocaleString()} ok`,
      `${this.calls.failed.toLocaleString()} failed`,
      this.gaps.count ? `${this.gaps.missed.toLocaleString()} missed` : '',
    ].filter(Boolean);
    setText(this.statsEl, parts.join(' · '));
    this.statsEl.dataset.events = String(this.events);
    this.statsEl.dataset.lastId = String(this.maxId);
    this.emptyEl.hidden = this.order.length > 0;
    this.cappedEl.hidden = this.droppedRows === 0;
    if (this.droppedRows) {
      setText(this.cappedEl, `Showing the newest ${MAX_ROWS} rows and everything still running; ${this.droppedRows.toLocaleString()} older rows left the page (the task log keeps every call: see Tasks).`);
    }
  }

  // tick moves the clocks of what is still running.
  tick() {
    for (const e of this.order) {
      if (!e.finished && e.el) setText(e.cells.dur, fmtDuration(this.elapsed(e)));
    }
  }

  // clock takes what an answer of the gateway says of its clock: its
  // Date header (whole seconds), and when the request was sent and the
  // answer received by the page's clock. It starts the page's knowledge
  // of the clocks afresh (the stream calls it on every connection, so a
  // local clock set meanwhile is caught up with).
  clock({date, sent, received}) {
    const d = Date.parse(date || '');
    if (Number.isNaN(d)) return;
    // The gateway stamped the answer at d or within the second after,
    // between sent and received on the page's clock.
    this.skewLo = sent - (d + 1000);
    this.skewHi = received - d;
    this.schedule();
  }

  // skew is the page's clock minus the gateway's: none while the two
  // agree as far as the page can tell (on one machine, or synchronised),
  // else the least correction the gateway's answers and events require.
  skew() {
    const hi = Math.max(this.skewLo, this.skewHi);
    return Math.min(Math.max(0, this.skewLo), hi);
  }

  // now is the gateway's time now, which running rows' durations reach
  // up to from their events' own times.
  now() {
    return Date.now() - this.skew();
  }

  elapsed(e) {
    if (e.kind === 'call') {
      if (e.finished || !e.stateTime) return e.totalMs;
      return (e.totalMs || 0) + Math.max(0, this.now() - e.stateTime.getTime());
    }
    if (e.kind === 'message' || e.kind === 'error' || e.kind === 'gap') return undefined;
    const end = e.end ? e.end.getTime() : this.now();
    return Math.max(0, end - e.first.getTime());
  }

  matches(e) {
    switch (this.filterKind) {
      case 'call': if (e.kind !== 'call') return false; break;
      case 'agent': if (!['workflow', 'agent', 'llm', 'message', 'error'].includes(e.kind)) return false; break;
      case 'running': if (e.finished) return false; break;
      case 'failed': if (!['error', 'failed', 'cancelled'].includes(e.state)) return false; break;
      default: break;
    }
    if (!this.filterText) return true;
    return e.search.includes(this.filterText);
  }

  build(e) {
    const cells = {
      time: h('span', {class: 'c-time'}),
      state: h('span', {class: 'badge'}),
      what: h('span', {class: 'c-what'}),
      detail: h('span', {class: 'c-detail'}),
      task: h('span', {class: 'c-task'}),
      dur: h('span', {class: 'c-dur num'}),
    };
    const summary = h('summary', {}, cells.time, h('span', {class: 'c-state'}, cells.state), cells.what, cells.detail, cells.task, cells.dur);
    const body = h('div', {class: 'body'});
    const el = h('details', {class: `row kind-${e.kind}`, dataset: {kind: e.kind}}, summary, body);
    el.addEventListener('toggle', () => {
      e.open = el.open;
      if (e.open) this.renderBody(e);
      else body.replaceChildren();
    });
    e.el = el;
    e.cells = cells;
    e.body = body;
    setText(cells.time, fmtTime(e.first));
    cells.time.title = e.first.toISOString();
    this.render(e);
  }

  render(e) {
    const c = e.cells;
    const el = e.el;
    el.dataset.state = e.state;
    c.state.className = `badge state-${e.state}`;
    setText(c.state, STATE_LABELS[e.state] || e.state);
    let what = '';
    let detail = '';
    switch (e.kind) {
      case 'call': {
        what = e.name || (e.server ? `${e.server}__${e.tool}` : e.callId);
        el.dataset.callId = e.callId;
        el.dataset.name = what;
        if (e.state === 'error' || e.state === 'cancelled') {
          detail = `${e.errKind || e.state}: ${e.errMsg || ''}`;
        } else if (e.state === 'awaiting_approval') {
          detail = `${compactJSON(e.args)} — ${e.approval && e.approval.message ? e.approval.message : 'needs approval'}`;
        } else if (e.state === 'executing' && e.out.length) {
          const last = e.out[e.out.length - 1].chunk.trimEnd().split('\n').pop();
          detail = `${e.progress ? progressText(e.progress) + ' · ' : ''}${last}`;
        } else if (e.state === 'executing' && e.progress) {
          detail = progressText(e.progress);
        } else if (e.result !== undefined && e.finished) {
          detail = e.result;
        } else {
          detail = compactJSON(e.args);
        }
        break;
      }
      case 'workflow': what = `workflow ${e.workflowId || ''}`; detail = e.input || ''; break;
      case 'agent': what = `agent ${e.display || ''}`; detail = e.agentName && e.agentName !== e.display ? e.agentName : ''; break;
      case 'llm': what = `LLM · ${e.display || ''}`; detail = e.finished ? 'model turn' : 'the model is answering…'; break;
      case 'message': what = 'message'; detail = messageText(e); break;
      case 'error': what = 'error'; detail = e.error; break;
      case 'gap': {
        what = 'gap';
        detail = `${e.missed.toLocaleString()} events missed (ids ${e.from}–${e.to}, ${e.reason})${e.error ? `: ${e.error}` : ''}${e.loadNote ? ` — ${e.loadNote}` : ''}`;
        break;
      }
      default: break;
    }
    // The caller, when calls have one, after the tool: who asked for it.
    const shown = e.kind === 'call' && e.caller ? `${what} · ${e.caller}` : what;
    setText(c.what, shown);
    c.what.title = shown;
    setText(c.detail, oneLine(detail, 240));
    if (e.kind === 'gap') this.gapButton(e);
    if (c.task.dataset.task !== e.task) {
      c.task.dataset.task = e.task;
      c.task.replaceChildren();
      if (e.task) {
        c.task.append(h('button', {type: 'button', class: 'link', text: shortID(e.task), title: `Task ${e.task}: show only its rows`,
          on: {click: (ev) => { ev.preventDefault(); ev.stopPropagation(); this.onFilterTask(e.task); }}}));
      }
    }
    setText(c.dur, fmtDuration(this.elapsed(e)));
    e.search = [e.kind, e.state, what, e.server, e.tool, e.task, e.callId, e.caller, e.errKind, detail.slice(0, 500)].join(' ').toLowerCase();
    el.hidden = !this.matches(e);
    if (e.open) this.renderBody(e);
  }

  gapButton(e) {
    if (e.gapBtn || !this.onLoadRange || !(e.from > 0)) return;
    e.gapBtn = h('button', {type: 'button', class: 'btn small', text: 'Load them', on: {click: async (ev) => {
      ev.preventDefault();
      ev.stopPropagation();
      e.gapBtn.disabled = true;
      e.loadNote = 'loading…';
      this.touch(e);
      this.schedule();
      try {
        const got = await this.onLoadRange(e.from, e.to);
        e.loadNote = got ? `${got.toLocaleString()} loaded` : 'the gateway no longer has them';
      } catch (err) {
        e.loadNote = `could not load them: ${err.message}`;
        e.gapBtn.disabled = false;
      }
      this.touch(e);
      this.schedule();
    }}});
    e.cells.detail.after(e.gapBtn);
  }

  renderBody(e) {
    const b = e.body;
    const parts = [];
    const kv = (k, v) => (v === undefined || v === null || v === '' ? null : h('div', {class: 'kv'}, h('span', {class: 'k', text: k}), h('span', {class: 'v', text: String(v)})));
    switch (e.kind) {
      case 'call': {
        parts.push(h('div', {class: 'kvs'},
          kv('call', e.callId), kv('server', e.server), kv('tool', e.tool), kv('caller', e.caller), kv('task', e.task),
          kv('batch', e.batch ? `${e.batch} #${e.index}` : ''), kv('pid', e.pid)));
        if (e.states.length) {
          const chain = h('ol', {class: 'states'});
          e.states.forEach((s, i) => {
            const next = e.states[i + 1];
            const spent = next ? fmtDuration(next.prevMs) : (FINAL_STATES.has(s.state) ? '' : '…');
            chain.append(h('li', {dataset: {state: s.state}}, h('span', {class: 'badge state-' + s.state, text: STATE_LABELS[s.state] || s.state}), spent ? ` ${spent}` : ''));
          });
          parts.push(h('div', {class: 'section'}, h('h4', {text: 'States'}), chain));
        }
        if (e.approval) {
          const a = e.approval;
          parts.push(h('div', {class: 'section approval-detail', dataset: {caller: a.caller || '', by: a.by || ''}}, h('h4', {text: 'Approval'}),
            h('p', {text: [a.caller ? `asked by ${a.caller}:` : '', a.message,
              a.outcome ? `→ ${a.outcome}${a.by ? ` by ${a.by}` : ''}${a.waitedMs !== undefined ? ` after ${fmtDuration(a.waitedMs)}` : ''}` : 'waiting for an answer (above)',
              a.answer].filter(Boolean).join(' ')})));
        }
        if (e.args !== undefined) parts.push(h('div', {class: 'section'}, h('h4', {text: 'Arguments'}), h('pre', {text: prettyJSON(e.args)})));
        if (e.progress) parts.push(h('div', {class: 'section'}, h('h4', {text: 'Progress'}), h('p', {text: progressText(e.progress)})));
        if (e.out.length) {
          const pre = h('pre', {class: 'output'});
          if (e.outCut) pre.append(h('span', {class: 'cut', text: '[earlier output not kept here]\n'}));
          for (const p of e.out) pre.append(h('span', {class: `out-${p.stream}`, text: p.chunk}));
          parts.push(h('div', {class: 'section'}, h('h4', {text: 'Output'}), pre));
        }
        if (e.errKind) parts.push(h('div', {class: 'error-box'}, h('strong', {class: 'kind', text: e.errKind}), ' ', e.errMsg || ''));
        // A failed call's result event repeats its error: not shown twice.
        if (e.result !== undefined && !(e.errKind && e.result.startsWith(`${e.errKind}:`))) {
          parts.push(h('div', {class: 'section'}, h('h4', {text: 'Result'}), h('pre', {text: e.result})));
        }
        break;
      }
      case 'workflow':
        parts.push(h('div', {class: 'kvs'}, kv('workflow', e.workflowId), kv('task', e.task)));
        if (e.input) parts.push(h('div', {class: 'section'}, h('h4', {text: 'Input'}), h('pre', {text: e.input})));
        break;
      case 'agent':
        parts.push(h('div', {class: 'kvs'}, kv('agent', e.agentName), kv('shown as', e.display), kv('id', e.agentId), kv('task', e.task)));
        break;
      case 'llm':
        parts.push(h('div', {class: 'kvs'}, kv('agent', e.agentName), kv('task', e.task)));
        break;
      case 'message':
        parts.push(h('pre', {class: 'message', text: messageText(e)}));
        break;
      case 'error':
        parts.push(h('div', {class: 'error-box', text: e.error}));
        break;
      case 'gap':
        parts.push(h('p', {text: `The stream could not deliver ${e.missed} events (${e.reason === 'slow' ? 'this page did not read fast enough' : e.reason === 'expired' ? 'they are older than the gateway keeps without a task log' : e.reason}). "Load them" asks the gateway to replay ids ${e.from}–${e.to}.`}));
        break;
      default: break;
    }
    b.replaceChildren(...parts.filter(Boolean));
  }
}

function progressText(p) {
  const n = p.total ? `${p.progress}/${p.total}` : `${p.progress}`;
  return p.message ? `${n} ${p.message}` : n;
}

function messageText(e) {
  if (e.content === null || e.content === undefined) e.content = (e.pieces || []).map((p) => p.text).join('');
  return e.content;
}
