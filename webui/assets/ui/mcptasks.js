// The gateway's MCP tasks (the io.modelcontextprotocol/tasks extension:
// calls that outlived their request), from GET /api/mcp-tasks, below the
// task list: each with its tool, status, caller, times, and the session
// task it belongs to (a link to it) and its call.

import {api} from './api.js';
import {h, fmtDateTime, showError, truncate} from './util.js';

export class MCPTasks {
  constructor({card, table, error}) {
    this.card = card;
    this.table = table;
    this.errorEl = error;
  }

  // refresh reads the list again. The card shows only when the gateway
  // keeps MCP tasks (a task log) and has some.
  async refresh() {
    let list;
    try {
      list = await api('/api/mcp-tasks?limit=50');
      showError(this.errorEl, null);
    } catch (e) {
      if (e && e.status === 404) {
        this.card.hidden = true;
        return;
      }
      showError(this.errorEl, e);
      return;
    }
    list = Array.isArray(list) ? list : [];
    this.card.hidden = list.length === 0;
    this.table.tBodies[0].replaceChildren(...list.map((t) => h('tr', {dataset: {task: t.id, status: t.status}},
      h('td', {}, h('div', {class: 'mono', text: truncate(t.id, 40), title: t.id}),
        h('div', {class: 'muted', text: `${t.route || ''} ${t.tool}`})),
      h('td', {}, h('span', {class: `badge mcp-${t.status}`, text: t.status})),
      h('td', {class: 'caller', text: t.caller ? t.caller.name : '–', title: t.caller ? t.caller.key : 'no caller (no authentication)'}),
      h('td', {class: 'when', text: fmtDateTime(t.created_at)}),
      h('td', {class: 'when', text: fmtDateTime(t.updated_at)}),
      h('td', {}, t.session
        ? h('a', {href: `#tasks/${encodeURIComponent(t.session)}`, class: 'mono', text: truncate(t.session, 24), title: t.session})
        : h('span', {class: 'muted', text: 'no session'}),
      t.call ? h('div', {class: 'muted mono', text: `call ${truncate(t.call, 26)}`, title: t.call}) : null))));
  }
}
