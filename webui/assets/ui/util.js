// Small helpers shared by the page's modules: building elements without
// innerHTML (text from tools is never parsed as HTML), and formatting
// times, durations and JSON.

// h builds an element. props: class, text, title, hidden, dataset (object),
// attrs (object), on (object of listeners); children are nodes or strings.
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null) continue;
    switch (k) {
      case 'class': el.className = v; break;
      case 'text': el.textContent = v; break;
      case 'dataset': Object.assign(el.dataset, v); break;
      case 'attrs': for (const [a, av] of Object.entries(v)) el.setAttribute(a, av); break;
      case 'on': for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn); break;
      default: el[k] = v;
    }
  }
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c);
  }
  return el;
}

// setText changes a node's text only when it differs: cheaper for the
// browser than an unconditional write, which invalidates layout.
export function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

// fmtDuration formats milliseconds for a person: 0.42 ms, 38 ms, 1.52 s,
// 2m 03s, 1h 02m.
export function fmtDuration(ms) {
  if (ms === undefined || ms === null || Number.isNaN(ms)) return '';
  if (ms < 0) ms = 0;
  if (ms < 1) return `${ms.toFixed(2)} ms`;
  if (ms < 10) return `${ms.toFixed(1)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(Math.floor(s % 60)).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, '0')}m`;
}

const timeFmt = new Intl.DateTimeFormat(undefined, {hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false});
const dateTimeFmt = new Intl.DateTimeFormat(undefined, {month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false});

// fmtTime formats a time of today as HH:MM:SS.mmm.
export function fmtTime(d) {
  if (!(d instanceof Date) || Number.isNaN(d.getTime())) return '';
  return `${timeFmt.format(d)}.${String(d.getMilliseconds()).padStart(3, '0')}`;
}

// fmtDateTime formats a time with its day.
export function fmtDateTime(d) {
  if (typeof d === 'string') d = new Date(d);
  if (!(d instanceof Date) || Number.isNaN(d.getTime())) return '';
  return dateTimeFmt.format(d);
}

// truncate cuts s to n characters, marking the cut.
export function truncate(s, n) {
  if (s === undefined || s === null) return '';
  s = String(s);
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

// oneLine squeezes whitespace, for a summary in a row.
export function oneLine(s, n = 200) {
  return truncate(String(s ?? '').replace(/\s+/g, ' ').trim(), n);
}

// compactJSON is a one-line JSON summary of v, at most n characters.
export function compactJSON(v, n = 160) {
  if (v === undefined) return '';
  let s;
  try { s = JSON.stringify(v); } catch { s = String(v); }
  return truncate(s, n);
}

// prettyJSON indents v, for a <pre>.
export function prettyJSON(v) {
  try { return JSON.stringify(v, null, 2); } catch { return String(v); }
}

// shortID keeps the end of a long id (toolmux ids are time-ordered, so
// their start is the same for ids made close together).
export function shortID(id) {
  if (!id) return '';
  return id.length > 12 ? `…${id.slice(-8)}` : id;
}

// debounce calls fn once, ms after the last of a burst of calls.
export function debounce(fn, ms) {
  let t = 0;
  return (...args) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...args), ms);
  };
}

// showError puts an error (an ApiError or any Error) into box, or hides
// box when err is null.
export function showError(box, err) {
  if (!box) return;
  if (!err) {
    box.hidden = true;
    box.textContent = '';
    return;
  }
  box.hidden = false;
  box.replaceChildren(errorNode(err));
}

// errorNode renders an error: its kind in bold, then its message.
export function errorNode(err) {
  const kind = err.kind || 'error';
  return h('span', {}, h('strong', {class: 'kind', text: kind}), ' ', err.message || String(err));
}
