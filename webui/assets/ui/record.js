// A call record (what toolmux call --json prints) as a person reads it:
// outcome, result parts, error with its kind, the pipeline's notes, and
// the whole record as JSON underneath.

import {h, fmtDuration, fmtDateTime, prettyJSON} from './util.js';

// recordOutcome is the record's state: success, tool_error (the tool ran
// and said it failed) or the kind of the error.
export function recordOutcome(rec) {
  if (!rec || !rec.error) return 'success';
  return rec.error.kind || 'error';
}

// renderRecord returns the element of one record; status is the HTTP
// status of the call, when it came from the call form.
export function renderRecord(rec, {status} = {}) {
  const outcome = recordOutcome(rec);
  const ok = outcome === 'success';
  const head = h('div', {class: 'record-head'},
    h('span', {class: `badge state-${ok ? 'success' : 'error'}`, text: ok ? 'success' : outcome}),
    h('span', {class: 'mono name', text: rec.name || `${rec.server}__${rec.tool}`}),
    status ? h('span', {class: 'muted', text: `HTTP ${status}`}) : null,
    rec.duration_ms !== undefined ? h('span', {class: 'muted', text: fmtDuration(rec.duration_ms)}) : null,
    rec.attempts > 1 ? h('span', {class: 'muted', text: `${rec.attempts} attempts`}) : null,
    rec.started_at ? h('span', {class: 'muted', text: fmtDateTime(rec.started_at)}) : null);
  const parts = [head];
  if (rec.error) {
    const e = rec.error;
    parts.push(h('div', {class: 'error-box'},
      h('strong', {class: 'kind', text: e.kind}), ' ', e.message || '',
      e.suggestion ? h('div', {class: 'suggestion', text: `Suggestion: ${e.suggestion}`}) : null,
      e.detail ? h('pre', {class: 'detail', text: e.detail}) : null));
  }
  if (rec.result) parts.push(renderResult(rec.result));
  if (rec.verdict && rec.verdict.rollback) {
    parts.push(h('div', {class: 'warn-box', text: `Rollback advised${rec.verdict.reason ? `: ${rec.verdict.reason}` : ''}`}));
  }
  if (rec.instructions && rec.instructions.length) {
    parts.push(h('div', {class: 'section'}, h('h4', {text: 'Instructions'}), h('ul', {}, ...rec.instructions.map((s) => h('li', {text: s})))));
  }
  if (rec.notes && rec.notes.length) {
    parts.push(h('div', {class: 'section'}, h('h4', {text: 'Pipeline notes'}),
      h('ul', {class: 'notes'}, ...rec.notes.map((n) => h('li', {}, h('span', {class: 'tag', text: n.layer}), ' ', n.message || '')))));
  }
  parts.push(h('div', {class: 'section'}, h('h4', {text: 'Arguments'}), h('pre', {text: prettyJSON(rec.arguments ?? {})})));
  const raw = h('details', {class: 'raw'}, h('summary', {text: 'Whole record (JSON)'}), h('pre', {text: prettyJSON(rec)}));
  parts.push(raw);
  return h('div', {class: `record ${ok ? 'ok' : 'failed'}`, dataset: {outcome, callId: rec.id || ''}}, ...parts);
}

// renderResult shows every content part: text as text, images as images,
// the rest described; then the structured content.
export function renderResult(res) {
  const box = h('div', {class: 'section result'}, h('h4', {text: res.isError ? 'Result (the tool reported an error)' : 'Result'}));
  for (const c of res.content || []) {
    switch (c.type) {
      case 'text':
        box.append(h('pre', {text: c.text ?? ''}));
        break;
      case 'image':
        if (c.data && /^image\/(png|jpeg|gif|webp)$/.test(c.mimeType || '')) {
          box.append(h('img', {class: 'result-image', src: `data:${c.mimeType};base64,${c.data}`, alt: 'image returned by the tool'}));
        } else {
          box.append(h('p', {class: 'muted', text: `[image ${c.mimeType || ''}]`}));
        }
        break;
      case 'resource':
        box.append(h('p', {class: 'muted', text: `[resource ${c.resource?.uri || ''} ${c.resource?.mimeType || ''}]`}));
        if (c.resource?.text) box.append(h('pre', {text: c.resource.text}));
        break;
      case 'resource_link':
        box.append(h('p', {class: 'muted', text: `[link ${c.uri || ''}${c.name ? ` "${c.name}"` : ''}]`}));
        break;
      default:
        box.append(h('p', {class: 'muted', text: `[${c.type}${c.mimeType ? ` ${c.mimeType}` : ''}]`}));
    }
  }
  if (res.structuredContent !== undefined) {
    box.append(h('h4', {text: 'Structured content'}), h('pre', {text: prettyJSON(res.structuredContent)}));
  }
  return box;
}
