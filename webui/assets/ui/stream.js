// The event stream /api/events read with fetch and a ReadableStream (so
// that the bearer token can be sent), reconnecting with backoff and
// resuming exactly: every reconnection sends Last-Event-ID, and the
// gateway replays what was published in between (from its memory, or
// from the task log).

import {SSEParser} from './sse.js';
import {authHeaders, refused} from './api.js';

// The delay before the first reconnection is the server's retry field
// (3 s from toolmux); it doubles with each failure up to MAX_DELAY, with
// jitter so that many pages do not come back at once.
const MIN_DELAY = 1000;
const MAX_DELAY = 30000;

// The gateway writes a heartbeat after 15 s of silence; a connection that
// has carried nothing for three of those is dead even if TCP has not
// noticed (a laptop that slept, a proxy that dropped it): drop it and
// resume on a new one.
const SILENCE_LIMIT = 45000;

// read reads one response body of SSE text, calling onEvent with each
// parsed envelope and the parser's event. It returns when the body ends.
async function read(res, parser, onData = () => {}) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      onData();
      parser.push(value);
    }
  } finally {
    parser.end();
    reader.releaseLock();
  }
}

// parseEnvelope turns an SSE event into toolmux's envelope, or null when
// its data is not one.
function parseEnvelope(ev) {
  try {
    const env = JSON.parse(ev.data);
    return env && typeof env === 'object' ? env : null;
  } catch {
    return null;
  }
}

// EventStream is the page's standing connection. Its status is one of
// connecting, live, reconnecting, paused, unauthorized; onStatus gets it
// with details ({delay, error}).
export class EventStream {
  // onClock gets, on each connection, the answer's Date header with when
  // it was asked and received by the page's clock (Live.clock).
  constructor({url = '/api/events', onEvent, onStatus = () => {}, onClock = () => {}}) {
    this.url = url;
    this.onEvent = onEvent;
    this.onStatus = onStatus;
    this.onClock = onClock;
    this.lastEventId = '';
    this.retry = 3000;
    this.failures = 0;
    this.running = false;
    this.gen = 0; // a pause ends the loop of its generation
    this.ctrl = null;
    this.wake = null; // resolves the backoff sleep early
    this.status = 'paused';
    this.lastData = 0;
    this.silent = false;
    setInterval(() => {
      if (this.status === 'live' && this.ctrl && Date.now() - this.lastData > SILENCE_LIMIT) {
        this.silent = true;
        this.ctrl.abort();
      }
    }, 5000);
  }

  setStatus(status, detail = {}) {
    this.status = status;
    this.onStatus(status, detail);
  }

  // start connects (or reconnects now, when waiting to retry).
  start() {
    if (this.running) {
      if (this.wake) this.wake();
      return;
    }
    this.running = true;
    this.loop(++this.gen);
  }

  // pause closes the connection; start resumes from the last event id.
  pause() {
    this.running = false;
    if (this.ctrl) this.ctrl.abort();
    if (this.wake) this.wake();
    this.setStatus('paused');
  }

  // restart drops the connection and connects again at once (after the
  // token changed).
  restart() {
    this.pause();
    this.start();
  }

  async loop(gen) {
    const current = () => this.running && this.gen === gen;
    while (current()) {
      const ctrl = new AbortController();
      this.ctrl = ctrl;
      this.setStatus('connecting');
      let error = '';
      try {
        const headers = {Accept: 'text/event-stream', ...authHeaders()};
        if (this.lastEventId) headers['Last-Event-ID'] = this.lastEventId;
        const sent = Date.now();
        const res = await fetch(this.url, {headers, signal: ctrl.signal, cache: 'no-store'});
        if (res.ok) this.onClock({date: res.headers.get('Date'), sent, received: Date.now()});
        if (res.status === 401) {
          if (!current()) return;
          this.running = false;
          this.setStatus('unauthorized');
          await refused(res);
          return;
        }
        if (res.status === 400 && this.lastEventId) {
          // The gateway refused our id (it is not one of its ids): start
          // again from the live events rather than retry forever.
          this.lastEventId = '';
        }
        if (!res.ok || !res.body) {
          error = `HTTP ${res.status}: ${(await res.text()).trim()}`;
        } else {
          if (!current()) return;
          this.lastData = Date.now();
          this.silent = false;
          this.setStatus('live');
          const parser = new SSEParser((ev) => {
            if (!current()) return;
            this.lastEventId = parser.lastEventId;
            // Reset the backoff once the connection has carried an event:
            // a gateway that accepts and drops at once keeps backing off.
            this.failures = 0;
            const env = parseEnvelope(ev);
            if (env) this.onEvent(env);
          }, {lastEventId: this.lastEventId, onRetry: (ms) => { this.retry = ms; }});
          await read(res, parser, () => { this.lastData = Date.now(); });
          if (!current()) return;
          this.lastEventId = parser.lastEventId;
          error = 'the gateway ended the stream';
        }
      } catch (e) {
        if (!current()) return;
        error = this.silent ? `nothing heard for ${SILENCE_LIMIT / 1000}s` : e.name === 'AbortError' ? 'aborted' : e.message;
      }
      if (!current()) return;
      this.failures++;
      const base = Math.max(MIN_DELAY, this.retry) * 2 ** Math.min(this.failures - 1, 5);
      const delay = Math.round(Math.min(MAX_DELAY, base) * (0.8 + 0.4 * Math.random()));
      this.setStatus('reconnecting', {delay, until: Date.now() + delay, error});
      let wake;
      await new Promise((resolve) => {
        const t = setTimeout(resolve, delay);
        wake = () => { clearTimeout(t); resolve(); };
        this.wake = wake;
      });
      if (this.wake === wake) this.wake = null;
    }
  }
}

// readRange replays the events with ids from..to (both included) on a
// connection of its own, and closes it: for the events a gap marker
// reports missing, or those from before the page was opened. It stops at
// the first event past `to`, at a heartbeat (the replay is over), or after
// timeoutMs. onEvent gets each envelope in the range. It returns how many
// it got.
export async function readRange(from, to, onEvent, {url = '/api/events', timeoutMs = 30000} = {}) {
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), timeoutMs);
  let got = 0;
  try {
    const headers = {Accept: 'text/event-stream', ...authHeaders(), 'Last-Event-ID': String(Math.max(0, from - 1))};
    const res = await fetch(url, {headers, signal: ctrl.signal, cache: 'no-store'});
    if (res.status === 401) {
      const {login} = await refused(res);
      throw new Error(login ? 'log in to use this gateway' : 'the gateway wants a bearer token');
    }
    if (!res.ok) throw new Error(`HTTP ${res.status}: ${(await res.text()).trim()}`);
    const parser = new SSEParser((ev) => {
      const env = parseEnvelope(ev);
      if (!env) return;
      if (env.event === 'heartbeat') { ctrl.abort(); return; }
      if (env.event === 'gap') {
        if (env.data && env.data.to_id >= to) ctrl.abort();
        return;
      }
      if (typeof env.id !== 'number') return;
      if (env.id > to) { ctrl.abort(); return; }
      if (env.id >= from) {
        got++;
        onEvent(env);
      }
      if (env.id >= to) ctrl.abort();
    });
    await read(res, parser);
  } catch (e) {
    if (e.name !== 'AbortError') throw e;
  } finally {
    clearTimeout(timer);
  }
  return got;
}
