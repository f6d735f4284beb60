// The page's one way to the gateway: fetch with the bearer token (when the
// user gave one), JSON in and out, errors as ApiError with the API's
// {"error": {"kind", "message"}}. A page logged in at the gateway's
// identity provider has a session cookie instead, which the browser sends
// by itself (same origin); what changes something also carries the
// session's CSRF token, which the gateway gave in a cookie of its own.

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

// onUnauthorized registers fn, called when the gateway answers 401 with
// {login}: where to log in when the gateway has a login for the page
// ('' when a token is what it wants).
export function onUnauthorized(fn) { unauthorizedListeners.push(fn); }

export function unauthorized(detail = {login: ''}) {
  for (const fn of unauthorizedListeners) fn(detail);
}

// refused reads a 401's body for where to log in, and tells the
// listeners; it returns the detail.
export async function refused(res) {
  let login = '';
  try {
    const body = await res.json();
    if (body && body.error && typeof body.error.login === 'string' && body.error.login.startsWith('/')) login = body.error.login;
  } catch { /* not the API's answer: a token is wanted */ }
  const detail = {login};
  unauthorized(detail);
  return detail;
}

// The session's CSRF token, from its cookie (__Host- prefixed beyond
// loopback); '' without a session.
const CSRF_COOKIES = ['__Host-toolmux_csrf', 'toolmux_csrf'];
export function csrfToken() {
  for (const part of document.cookie.split(';')) {
    const [name, ...rest] = part.trim().split('=');
    if (CSRF_COOKIES.includes(name)) return rest.join('=');
  }
  return '';
}

// authHeaders are the headers every data request carries.
export function authHeaders() {
  const t = memoryToken || getToken();
  const h = t ? {Authorization: `Bearer ${t}`} : {};
  const csrf = csrfToken();
  if (csrf) h['X-CSRF-Token'] = csrf;
  return h;
}

// logout ends the page's session at the gateway.
export async function logout() {
  const res = await fetch('/auth/logout', {method: 'POST', headers: authHeaders(), cache: 'no-store'});
  if (!res.ok) throw new ApiError(res.status, `http_${res.status}`, (await res.text()).trim() || res.statusText);
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
    const {login} = await refused(res);
    throw new ApiError(401, 'unauthorized', login ? 'log in to use this gateway (the Log in button)' : 'the gateway wants a bearer token: set it with the Token button');
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
