// A Server-Sent Events parser following the WHATWG rules, for streams read
// with fetch: the browser's EventSource cannot send an Authorization
// header, so the page reads /api/events itself.
//
// Lines end with CR, LF or CRLF (a CRLF split between two chunks is one
// line end); a byte-order mark at the start is skipped; lines starting
// with ":" are comments; one space after the colon is dropped; several
// data lines join with LF; an id containing NUL is ignored; retry takes
// digits only. The last event id persists across events (and across
// connections, when the caller passes it on), as EventSource's does.

export class SSEParser {
  // onEvent({type, data, lastEventId}) is called for every dispatched
  // event; onRetry(ms) for every valid retry field.
  constructor(onEvent, {lastEventId = '', onRetry = () => {}} = {}) {
    this.onEvent = onEvent;
    this.onRetry = onRetry;
    this.lastEventId = lastEventId;
    this.partial = '';   // a line not yet ended
    this.afterCR = false; // the previous chunk ended with CR
    this.started = false; // past the optional byte-order mark
    this.data = [];
    this.type = '';
  }

  // push feeds decoded text (a TextDecoderStream's chunks).
  push(text) {
    if (!this.started) {
      if (text.length === 0) return;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
      this.started = true;
    }
    let start = 0;
    if (this.afterCR) {
      if (text.length === 0) return;
      if (text.charCodeAt(0) === 10) start = 1;
      this.afterCR = false;
    }
    const n = text.length;
    let i = start;
    while (i < n) {
      // Find the next CR or LF from i.
      let j = i;
      while (j < n) {
        const c = text.charCodeAt(j);
        if (c === 10 || c === 13) break;
        j++;
      }
      if (j === n) break;
      const line = this.partial ? this.partial + text.slice(i, j) : text.slice(i, j);
      this.partial = '';
      this.line(line);
      if (text.charCodeAt(j) === 13) {
        if (j + 1 < n) {
          if (text.charCodeAt(j + 1) === 10) j++;
        } else {
          this.afterCR = true;
        }
      }
      i = j + 1;
    }
    if (i < n) this.partial += text.slice(i);
  }

  // end is called at the end of the stream: an event not ended by a
  // blank line is discarded, as the rules say.
  end() {
    this.partial = '';
    this.data = [];
    this.type = '';
    this.afterCR = false;
  }

  line(line) {
    if (line === '') {
      this.dispatch();
      return;
    }
    if (line.charCodeAt(0) === 58) return; // ":" comment
    const colon = line.indexOf(':');
    let field = line;
    let value = '';
    if (colon >= 0) {
      field = line.slice(0, colon);
      value = line.slice(colon + 1);
      if (value.charCodeAt(0) === 32) value = value.slice(1);
    }
    switch (field) {
      case 'event': this.type = value; break;
      case 'data': this.data.push(value); break;
      case 'id': if (!value.includes('\0')) this.lastEventId = value; break;
      case 'retry': if (/^[0-9]+$/.test(value)) this.onRetry(parseInt(value, 10)); break;
      default: break; // unknown fields are ignored
    }
  }

  dispatch() {
    if (this.data.length === 0) {
      this.type = '';
      return;
    }
    const ev = {type: this.type || 'message', data: this.data.join('\n'), lastEventId: this.lastEventId};
    this.data = [];
    this.type = '';
    this.onEvent(ev);
  }
}
