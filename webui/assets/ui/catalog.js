// Servers with their health, the tools with what the policy does with
// them, the gateway's endpoints, and the form that calls a tool.

import {api} from './api.js';
import {h, setText, showError, truncate, prettyJSON, errorNode} from './util.js';
import {renderRecord} from './record.js';

const HINTS = [
  ['readOnlyHint', true, 'read-only'],
  ['destructiveHint', true, 'destructive'],
  ['idempotentHint', true, 'idempotent'],
  ['openWorldHint', true, 'open world'],
];

function hints(t) {
  const a = t.annotations || {};
  return HINTS.filter(([k, v, label]) => a[k] === v && !(label === 'destructive' && a.readOnlyHint)).map(([, , label]) => label);
}

// firstSentence is a tool description's lead, for a table row.
function firstSentence(s) {
  const line = String(s || '').split('\n')[0];
  const m = line.match(/^(.{20,}?[.!?])(\s|$)/);
  return truncate(m ? m[1] : line, 180);
}

// skeleton makes arguments from a JSON schema for the call form: required
// properties with a value of their type (their default, const, first
// enum value or example when there is one); optional properties only when
// they have a default. The schema's properties are listed beside the
// form, so the rest is one look away.
export function skeleton(schema, depth = 0) {
  if (!schema || typeof schema !== 'object' || depth > 6) return null;
  if ('default' in schema) return schema.default;
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length) return schema.enum[0];
  if (Array.isArray(schema.examples) && schema.examples.length) return schema.examples[0];
  let type = schema.type;
  if (Array.isArray(type)) type = type.find((t) => t !== 'null') || type[0];
  if (!type) {
    const alt = schema.anyOf || schema.oneOf || schema.allOf;
    if (Array.isArray(alt) && alt.length) return skeleton(alt[0], depth + 1);
    if (schema.properties) type = 'object';
    else if (schema.items) type = 'array';
  }
  switch (type) {
    case 'object': {
      const out = {};
      const required = new Set(schema.required || []);
      for (const [k, s] of Object.entries(schema.properties || {})) {
        if (required.has(k) || (s && typeof s === 'object' && 'default' in s)) out[k] = skeleton(s, depth + 1);
      }
      return out;
    }
    case 'array':
      return schema.minItems > 0 && schema.items ? [skeleton(schema.items, depth + 1)] : [];
    case 'string': return '';
    case 'integer':
    case 'number': return typeof schema.minimum === 'number' ? schema.minimum : 0;
    case 'boolean': return false;
    default: return null;
  }
}

function typeOf(s) {
  if (!s || typeof s !== 'object') return '';
  if (Array.isArray(s.enum)) return s.enum.map((v) => JSON.stringify(v)).join(' | ');
  let t = Array.isArray(s.type) ? s.type.join(' | ') : s.type || '';
  if (t === 'array' && s.items && s.items.type) t = `${s.items.type}[]`;
  return t;
}

export class Catalog {
  constructor(els) {
    this.els = els;
    this.tools = [];
    this.servers = [];
    this.loaded = false;
    this.drafts = new Map(); // tool name → arguments text being edited
    const refilter = () => this.filterTools();
    els.toolsFilter.addEventListener('input', refilter);
    els.toolsServer.addEventListener('change', refilter);
    els.toolsApproval.addEventListener('change', refilter);
    els.serversRefresh.addEventListener('click', () => this.refresh());
    els.callTool.addEventListener('change', () => this.selectTool(els.callTool.value));
    els.callArgs.addEventListener('input', () => this.drafts.set(els.callTool.value, els.callArgs.value));
    els.callArgs.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        els.callForm.requestSubmit();
      }
    });
    els.callReset.addEventListener('click', () => {
      this.drafts.delete(els.callTool.value);
      this.selectTool(els.callTool.value);
    });
    els.callForm.addEventListener('submit', (e) => {
      e.preventDefault();
      this.call();
    });
  }

  async refresh() {
    await Promise.all([this.loadServers(), this.loadTools(), this.loadEndpoints()]);
    this.loaded = true;
  }

  async loadServers() {
    try {
      const list = await api('/api/servers');
      this.servers = Array.isArray(list) ? list : [];
      showError(this.els.serversError, null);
    } catch (e) {
      showError(this.els.serversError, e);
      return;
    }
    const body = this.els.servers.tBodies[0];
    body.replaceChildren(...this.servers.map((s) => {
      const err = s.error ? h('details', {class: 'inline'}, h('summary', {text: truncate(s.error, 120)}),
        h('pre', {text: [s.error, s.detail].filter(Boolean).join('\n\n')})) : (s.detail ? h('pre', {text: s.detail}) : '');
      return h('tr', {dataset: {server: s.server}},
        h('td', {class: 'mono', text: s.server}),
        h('td', {}, h('span', {class: `badge state-${s.state}`, text: s.state})),
        h('td', {text: s.transport || ''}),
        h('td', {class: 'num', text: String(s.tools ?? '')}),
        h('td', {class: 'num', text: String(s.restarts ?? 0)}),
        h('td', {class: 'err'}, err));
    }));
  }

  async loadEndpoints() {
    try {
      const text = await api('/', {accept: 'text/plain'});
      setText(this.els.endpoints, String(text).trim());
    } catch (e) {
      this.els.endpoints.replaceChildren(errorNode(e));
    }
  }

  async loadTools() {
    try {
      const list = await api('/api/tools');
      this.tools = Array.isArray(list) ? list : [];
      showError(this.els.toolsError, null);
    } catch (e) {
      showError(this.els.toolsError, e);
      return;
    }
    // Pins: a tool whose server changed its definition since it was
    // pinned is shown changed, with the difference and a way to accept
    // it. Without a data directory the route is 404: nothing to show.
    this.pins = new Map();
    try {
      const pins = await api('/api/pins');
      for (const p of Array.isArray(pins) ? pins : []) this.pins.set(`${p.server}/${p.tool}`, p);
    } catch { /* no pins kept */ }
    // The server filter: the servers the tools come from.
    const servers = [...new Set(this.tools.map((t) => t.server))].sort();
    const keep = this.els.toolsServer.value;
    this.els.toolsServer.replaceChildren(h('option', {value: '', text: 'All servers'}), ...servers.map((s) => h('option', {value: s, text: s})));
    this.els.toolsServer.value = servers.includes(keep) ? keep : '';
    const body = this.els.tools.tBodies[0];
    body.replaceChildren(...this.tools.map((t) => {
      const row = h('tr', {dataset: {name: t.name, server: t.server, approval: t.approval || ''}},
        h('td', {}, h('div', {class: 'mono name', text: t.name}), t.title && t.title !== t.tool ? h('div', {class: 'muted', text: t.title}) : null),
        h('td', {}, t.approval ? h('span', {class: `badge approval-${t.approval}`, text: t.approval}) : '', this.pinNode(t)),
        h('td', {}, ...hints(t).map((x) => h('span', {class: 'tag', text: x}))),
        h('td', {class: 'desc'}, h('details', {class: 'inline'}, h('summary', {text: firstSentence(t.description)}), h('pre', {class: 'wrap', text: t.description || ''}))),
        h('td', {}, t.approval === 'deny' ? '' : h('a', {class: 'btn small', href: '#call', text: 'Call', dataset: {callTool: t.name},
          on: {click: () => this.prefill(t.name)}})));
      row.dataset.search = `${t.name} ${t.title || ''} ${t.description || ''}`.toLowerCase();
      return row;
    }));
    this.filterTools();
    this.fillCallSelect();
  }

  // pinNode shows a changed pin: its policy, the difference, and a button
  // that accepts the definition reviewed (its sha256, so one changed
  // again since is refused). The row's description is the pinned one,
  // as models are shown it while the tool is held (/api/tools); the new
  // definition is only here, marked pending, for the person to review.
  pinNode(t) {
    const p = this.pins && this.pins.get(`${t.server}/${t.tool}`);
    if (!p || p.state !== 'changed') return null;
    const status = h('span', {class: 'muted'});
    const accept = h('button', {type: 'button', class: 'btn small pin-accept', text: 'Accept new definition', on: {click: async () => {
      try {
        await api(`/api/pins/${encodeURIComponent(t.server)}/${encodeURIComponent(t.tool)}/accept`, {method: 'POST', body: {sha256: p.current}});
        await this.loadTools();
      } catch (e) {
        status.replaceChildren(errorNode(e));
      }
    }}});
    return h('details', {class: 'inline pin-changed'}, h('summary', {}, h('span', {class: 'badge approval-deny', text: `changed (${p.policy})`})),
      h('div', {class: 'muted pin-pending', text: `Pending, not accepted: - the pinned definition, + what the server presents now. Models are shown ${
        p.policy === 'hold' || p.policy === 'ask' ? 'the pinned one until it is accepted' : `the new one (policy ${p.policy})`}.`}),
      h('pre', {class: 'wrap', text: p.diff || ''}), accept, status);
  }

  filterTools() {
    const q = this.els.toolsFilter.value.trim().toLowerCase();
    const server = this.els.toolsServer.value;
    const approval = this.els.toolsApproval.value;
    let shown = 0;
    for (const row of this.els.tools.tBodies[0].rows) {
      const ok = (!q || row.dataset.search.includes(q)) && (!server || row.dataset.server === server) && (!approval || row.dataset.approval === approval);
      row.hidden = !ok;
      if (ok) shown++;
    }
    setText(this.els.toolsCount, shown === this.tools.length ? String(this.tools.length) : `${shown} of ${this.tools.length}`);
  }

  // --- the call form ----------------------------------------------------

  fillCallSelect() {
    const sel = this.els.callTool;
    const keep = sel.value;
    const groups = new Map();
    for (const t of this.tools) {
      if (!groups.has(t.server)) groups.set(t.server, []);
      groups.get(t.server).push(t);
    }
    sel.replaceChildren(...[...groups].map(([server, tools]) => h('optgroup', {label: server},
      ...tools.map((t) => h('option', {value: t.name, disabled: t.approval === 'deny',
        text: `${t.tool}${t.approval === 'ask' ? '  (asks for approval)' : t.approval === 'deny' ? '  (denied)' : ''}`})))));
    const names = this.tools.map((t) => t.name);
    sel.value = names.includes(keep) ? keep : (this.tools.find((t) => t.approval !== 'deny') || {}).name || '';
    this.selectTool(sel.value);
  }

  prefill(name) {
    this.els.callTool.value = name;
    this.selectTool(name);
  }

  selectTool(name) {
    const t = this.tools.find((x) => x.name === name);
    const els = this.els;
    showError(els.callArgsError, null);
    if (!t) {
      setText(els.callDesc, '');
      els.callSchema.replaceChildren();
      return;
    }
    setText(els.callDesc, t.description || '');
    els.callArgs.value = this.drafts.get(name) ?? prettyJSON(skeleton(t.input_schema) ?? {});
    const props = Object.entries((t.input_schema && t.input_schema.properties) || {});
    const required = new Set((t.input_schema && t.input_schema.required) || []);
    els.callSchema.replaceChildren(props.length ? h('table', {class: 'grid props'},
      h('thead', {}, h('tr', {}, h('th', {text: 'argument'}), h('th', {text: 'type'}), h('th', {text: 'description'}))),
      h('tbody', {}, ...props.map(([k, s]) => h('tr', {},
        h('td', {class: 'mono'}, k, required.has(k) ? h('span', {class: 'req', text: ' *', title: 'required'}) : ''),
        h('td', {class: 'mono', text: typeOf(s)}),
        h('td', {text: (s && s.description) || ''}))))) : h('p', {class: 'muted', text: 'This tool takes no arguments.'}));
  }

  async call() {
    const els = this.els;
    const t = this.tools.find((x) => x.name === els.callTool.value);
    if (!t) return;
    let args;
    try {
      args = els.callArgs.value.trim() ? JSON.parse(els.callArgs.value) : {};
      if (!args || typeof args !== 'object' || Array.isArray(args)) throw new Error('the arguments must be a JSON object, {…}');
    } catch (e) {
      showError(els.callArgsError, {kind: 'invalid JSON', message: e.message});
      return;
    }
    showError(els.callArgsError, null);
    const body = {arguments: args};
    const task = els.callTask.value.trim();
    if (task) body.task = task;
    els.callSubmit.disabled = true;
    els.callResult.replaceChildren(h('p', {class: 'muted', text: t.approval === 'ask'
      ? `Calling ${t.name}… it needs approval: answer it above.` : `Calling ${t.name}…`}));
    try {
      const {status, body: rec} = await api(`/api/tools/${encodeURIComponent(t.server)}/${encodeURIComponent(t.tool)}/call`, {method: 'POST', body, raw: true});
      if (rec && rec.server !== undefined) {
        els.callResult.replaceChildren(renderRecord(rec, {status}));
      } else if (rec && rec.error) {
        els.callResult.replaceChildren(h('div', {class: 'error-box'}, errorNode(rec.error)));
      } else {
        els.callResult.replaceChildren(h('pre', {text: prettyJSON(rec)}));
      }
    } catch (e) {
      els.callResult.replaceChildren(h('div', {class: 'error-box'}, errorNode(e)));
    } finally {
      els.callSubmit.disabled = false;
    }
  }
}
