// The user's own connections to the servers that take each user's OAuth
// authorization (a server's auth section of kind oauth; GET
// /api/connections): whether the user is connected to each, since when and
// until when, a Connect button, which asks the gateway for the
// authorization URL (POST) and goes there (the authorization server's
// page; its callback says when it is done), and a Disconnect button, which
// revokes the user's token (DELETE). Never a token. Shown only where some
// server takes users' authorizations: the tab stays hidden when
// /api/connections answers 404 or lists none.

import {api} from './api.js';
import {h, showError, fmtDateTime} from './util.js';

export class Connections {
  // els: tab (the nav link), panel, table, error.
  constructor(els) {
    this.els = els;
    this.present = false;
  }

  // probe asks the gateway for the caller's connections, and shows the
  // tab when some server takes them.
  async probe() {
    try {
      const c = await api('/api/connections');
      const list = (c && c.connections) || [];
      this.present = list.length > 0;
      if (this.present) this.render(list);
    } catch {
      this.present = false; // none (404), or not known yet (401)
    }
    this.els.tab.hidden = !this.present;
    return this.present;
  }

  async refresh() {
    try {
      const c = await api('/api/connections');
      this.render((c && c.connections) || []);
      showError(this.els.error, null);
    } catch (e) {
      showError(this.els.error, e);
    }
  }

  render(list) {
    this.els.table.tBodies[0].replaceChildren(...list.map((c) => this.row(c)));
  }

  row(c) {
    const path = `/api/connections/${encodeURIComponent(c.server)}`;
    const connect = async () => {
      try {
        const a = await api(path, {method: 'POST'});
        // The authorization server's page, in this tab: its callback
        // page says when it is done; Back returns here.
        location.assign(a.url);
      } catch (e) {
        showError(this.els.error, e);
      }
    };
    const disconnect = async () => {
      try {
        await api(path, {method: 'DELETE'});
        showError(this.els.error, null);
      } catch (e) {
        showError(this.els.error, e);
      }
      await this.refresh();
    };
    let state = 'not connected';
    if (c.connected) {
      state = `connected ${fmtDateTime(c.updated)}`;
      if (c.expires) state += c.refreshable ? `; renewed before ${fmtDateTime(c.expires)}` : `; until ${fmtDateTime(c.expires)}`;
    }
    return h('tr', {dataset: {server: c.server, connected: c.connected ? 'yes' : 'no'}},
      h('td', {class: 'mono', text: c.server}),
      h('td', {class: 'state', text: state}),
      h('td', {}, h('button', {type: 'button', class: 'btn primary connect', text: c.connected ? 'Connect again' : 'Connect', on: {click: connect}})),
      h('td', {}, c.connected ? h('button', {type: 'button', class: 'btn delete', text: 'Disconnect', on: {click: disconnect}}) : null));
  }
}
