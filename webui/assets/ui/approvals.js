// The calls waiting for a person (GET /api/approvals), shown above every
// view because they hold an agent up, with the four answers
// (POST /api/approvals/{id}). The list is read again when the stream says
// a call asks or was answered (by anyone: this page, another one, the
// API), and when the stream reconnects. Where callers are known, a card
// says who asked, and a question the page's caller may not answer (its
// own call, not being an approver) shows no answers but that it waits
// for an approver.

import {api} from './api.js';
import {h, setText, fmtDuration, prettyJSON, errorNode, debounce} from './util.js';

const DECISIONS = [
  {decision: 'once', label: 'Approve once', cls: 'primary', title: 'Run this call'},
  {decision: 'always_tool', label: 'Always (tool)', cls: '', title: 'Run it, and every later call of this tool, without asking (until the gateway restarts, or saved to the configuration when it has one)'},
  {decision: 'always_server', label: 'Always (server)', cls: '', title: 'Run it, and every later call of any tool of this server, without asking'},
  {decision: 'deny', label: 'Deny', cls: 'danger', title: 'Refuse the call: the agent gets approval_denied'},
];

export class Approvals {
  constructor({section, cards, count, onCount}) {
    this.section = section;
    this.cardsEl = cards;
    this.countEl = count;
    this.onCount = onCount || (() => {});
    this.cards = new Map(); // id → {el, item, timer els}
    this.refreshSoon = debounce(() => this.refresh(), 150);
    this.inflight = null;
    this.again = false;
    setInterval(() => this.tick(), 1000);
  }

  // refresh reads the queue; calls made while a read is under way make
  // one more read after it, so the last answer always reflects the last
  // event.
  async refresh() {
    if (this.inflight) {
      this.again = true;
      return this.inflight;
    }
    this.inflight = (async () => {
      try {
        const list = await api('/api/approvals');
        this.render(Array.isArray(list) ? list : []);
        this.error = null;
      } catch (e) {
        this.error = e;
        this.renderError(e);
      }
    })();
    await this.inflight;
    this.inflight = null;
    if (this.again) {
      this.again = false;
      await this.refresh();
    }
  }

  render(list) {
    // A list read: an error shown earlier (a 401 before the token was
    // given, a failed read) is over.
    this.section.querySelector(':scope > .error-box')?.remove();
    const seen = new Set();
    for (const item of list) {
      seen.add(item.id);
      if (!this.cards.has(item.id)) {
        const card = this.build(item);
        this.cards.set(item.id, card);
        this.cardsEl.append(card.el);
      }
    }
    for (const [id, card] of this.cards) {
      if (!seen.has(id) && !card.busy) {
        card.el.remove();
        this.cards.delete(id);
      }
    }
    this.section.hidden = this.cards.size === 0 && !this.error;
    setText(this.countEl, this.cards.size ? String(this.cards.size) : '');
    this.onCount(this.cards.size);
    this.tick();
  }

  renderError(e) {
    let box = this.section.querySelector(':scope > .error-box');
    if (!box) {
      box = h('div', {class: 'error-box'});
      this.section.insertBefore(box, this.cardsEl);
    }
    box.replaceChildren(errorNode(e));
    // A 401 is the token dialog's business; other errors are shown only
    // when there is a queue to show them with.
    this.section.hidden = e.status === 401 || this.cards.size === 0;
  }

  build(item) {
    const waited = h('span', {class: 'waited'});
    const status = h('div', {class: 'card-status'});
    // can_answer is absent from an older gateway's answer: it may.
    const mayAnswer = item.can_answer !== false;
    const buttons = mayAnswer ? DECISIONS.map((d) => h('button', {
      type: 'button', class: `btn ${d.cls}`, text: d.label, title: d.title,
      dataset: {decision: d.decision},
      on: {click: () => this.decide(item, d.decision)},
    })) : [];
    const el = h('article', {class: 'approval', dataset: {callId: item.id, caller: item.caller || ''}},
      h('header', {},
        h('span', {class: 'mono name', text: `${item.server}__${item.tool}`}),
        item.caller ? h('span', {class: 'asker', text: `asked by ${item.caller}`}) : null,
        item.task ? h('span', {class: 'task', text: `task ${item.task}`}) : null,
        waited),
      item.message || item.rule ? h('p', {class: 'why', text: item.message || `policy rule "${item.rule}"`}) : null,
      h('pre', {class: 'args', text: prettyJSON(item.arguments ?? {})}),
      mayAnswer ? h('div', {class: 'actions'}, ...buttons)
        : h('p', {class: 'waits-for-approver', text: 'Waits for an approver: you may not answer this question.'}),
      status);
    return {el, item, waited, status, buttons, busy: false};
  }

  async decide(item, decision) {
    const card = this.cards.get(item.id);
    if (!card || card.busy) return;
    card.busy = true;
    for (const b of card.buttons) b.disabled = true;
    setText(card.status, 'sending…');
    card.status.className = 'card-status';
    try {
      await api(`/api/approvals/${encodeURIComponent(item.id)}`, {method: 'POST', body: {decision}});
      card.el.classList.add('answered');
      setText(card.status, decision === 'deny' ? 'Denied.' : 'Approved.');
      card.busy = false;
    } catch (e) {
      card.busy = false;
      card.status.className = 'card-status error-box';
      if (e.status === 410) {
        // The call no longer waits (its client went away, the wait timed
        // out, someone else answered): the answer ran nothing.
        card.status.replaceChildren(`No longer waiting: ${e.message}`);
      } else if (e.status === 404) {
        card.status.replaceChildren('Someone else answered, or the wait timed out.');
      } else {
        card.status.replaceChildren(errorNode(e));
        for (const b of card.buttons) b.disabled = false;
      }
    }
    this.refreshSoon();
  }

  tick() {
    const now = Date.now();
    for (const card of this.cards.values()) {
      const since = Date.parse(card.item.since);
      const deadline = Date.parse(card.item.deadline);
      const parts = [];
      if (!Number.isNaN(since)) parts.push(`waiting ${fmtDuration(now - since)}`);
      if (!Number.isNaN(deadline)) parts.push(`refused in ${fmtDuration(Math.max(0, deadline - now))}`);
      setText(card.waited, parts.join(' · '));
    }
  }
}
