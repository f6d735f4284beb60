// The user's own secrets for the servers that take them (a server's auth
// section of kind user_secrets; GET /api/secrets): which are set and
// when, a field to set each (its value goes to the gateway, which keeps it
// in its vault; it is never shown again, here or anywhere), and a button
// to delete it. Shown only where some server takes users' secrets: the
// tab stays hidden when /api/secrets answers 404 or lists none.

import {api} from './api.js';
import {h, showError, fmtDateTime} from './util.js';

export class Secrets {
  // els: tab (the nav link), panel, table, error.
  constructor(els) {
    this.els = els;
    this.present = false;
  }

  // probe asks the gateway for the caller's secrets, and shows the tab
  // when some server takes them.
  async probe() {
    try {
      const s = await api('/api/secrets');
      const list = (s && s.secrets) || [];
      this.present = list.length > 0;
      if (this.present) this.render(list);
    } catch {
      this.present = false; // no vault (404), or not known yet (401)
    }
    this.els.tab.hidden = !this.present;
    return this.present;
  }

  async refresh() {
    try {
      const s = await api('/api/secrets');
      this.render((s && s.secrets) || []);
      showError(this.els.error, null);
    } catch (e) {
      showError(this.els.error, e);
    }
  }

  render(list) {
    this.els.table.tBodies[0].replaceChildren(...list.map((s) => this.row(s)));
  }

  row(s) {
    const path = `/api/secrets/${encodeURIComponent(s.server)}/${encodeURIComponent(s.name)}`;
    const input = h('input', {type: 'password', autocomplete: 'off', spellcheck: false, class: 'secret-value',
      attrs: {'aria-label': `Value of ${s.name} for ${s.server}`, placeholder: s.set ? 'new value' : 'value'}});
    const act = async (fn) => {
      try {
        await fn();
        showError(this.els.error, null);
      } catch (e) {
        showError(this.els.error, e);
      }
      await this.refresh();
    };
    const form = h('form', {class: 'secret-form', on: {submit: (e) => {
      e.preventDefault();
      const value = input.value;
      input.value = ''; // the value leaves the page with the request
      if (value) act(() => api(path, {method: 'PUT', body: {value}}));
    }}}, input, h('button', {type: 'submit', class: 'btn primary', text: s.set ? 'Replace' : 'Set'}));
    const state = s.set ? `set ${fmtDateTime(s.updated)}` : 'not set';
    return h('tr', {dataset: {server: s.server, name: s.name, set: s.set ? 'yes' : 'no'}},
      h('td', {class: 'mono', text: s.server}),
      h('td', {class: 'mono', text: s.name}),
      h('td', {class: 'state', text: s.configured ? state : `${state} (the server no longer takes it)`}),
      h('td', {}, s.configured ? form : null),
      h('td', {}, s.set ? h('button', {type: 'button', class: 'btn delete', text: 'Delete',
        on: {click: () => act(() => api(path, {method: 'DELETE'}))}}) : null));
  }
}
