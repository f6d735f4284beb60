// The page's one way to the gateway: fetch with the bearer token (when the
// user gave one), JSON in and out, errors as ApiError with the API's
// {"error": {"kind", "message"}}.

const TOKEN_KEY = 'toolmux.token';

// The token lives in sessionStorage: it survives a reload of the tab, and
// is gone when the tab is closed; other sites cannot read it.
export function getToken() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
}

export function setToken(token) {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch { /* storage disabled: the token lasts until the page is closed */ }
  memoryToken = token;
  for (const fn of tokenListeners) fn(token);
}

let memoryToken = getToken();
const tokenListeners = [];
const unauthorizedListeners = [];

// onTokenChange registers fn, called after setToken.
export function onTokenChange(fn) { tokenListeners.push(fn); }

// onUnauthorized registers fn, called when the gateway answers 401.
export function onUnauthorized(fn) { unauthorizedListeners.push(fn); }

export function unauthorized() {
  for (const fn of unauthorizedListeners) fn();
}

// authHeaders are the headers every data request carries.
export function authHeaders() {
  const t = memoryToken || getToken();
  return t ? {Authorization: `Bearer ${t}`} : {};
}

// ApiError is a failed request: status (0 when the gateway could not be
// reached), kind and message as the API names them.
export class ApiError extends Error {
  constructor(status, kind, message, body) {
    super(message);
    this.status = status;
    this.kind = kind;
    this.body = body;
  }
}

// api makes one request. Options: method, body (sent as JSON), accept,
// signal, raw (return {status, body} for any JSON answer instead of
// throwing on an error status: a call's record comes with 403 or 504 too).
export async function api(path, {method = 'GET', body, accept = 'application/json', signal, raw = false} = {}) {
  const headers = {Accept: accept, ...authHeaders()};
  const init = {method, headers, signal, cache: 'no-store'};
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'unreachable', `cannot reach the gateway (${e.message})`);
  }
  if (res.status === 401) {
    unauthorized();
    throw new ApiError(401, 'unauthorized', 'the gateway wants a bearer token: set it with the Token button');
  }
  if (res.status === 204) return raw ? {status: 204, body: null} : null;
  const text = await res.text();
  const ctype = res.headers.get('Content-Type') || '';
  let parsed = text;
  if (ctype.includes('json')) {
    try { parsed = JSON.parse(text); } catch { parsed = text; }
  }
  if (raw && typeof parsed === 'object') return {status: res.status, body: parsed};
  if (!res.ok) {
    const e = parsed && typeof parsed === 'object' ? parsed.error : null;
    if (e && e.kind) throw new ApiError(res.status, e.kind, e.message || '', parsed);
    // Answers that are not the API's (Host/Origin checks, body limits)
    // are a sentence of plain text.
    throw new ApiError(res.status, `http_${res.status}`, String(text).trim() || res.statusText, parsed);
  }
  return parsed;
}
