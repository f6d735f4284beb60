// The page's entry point: finds its elements, wires the views to the API
// and the event stream, and handles the token and the tabs.

import {api, getToken, setToken, onTokenChange, onUnauthorized, logout} from './api.js';
import {EventStream, readRange} from './stream.js';
import {Live} from './live.js';
import {Approvals} from './approvals.js';
import {Catalog} from './catalog.js';
import {Tasks} from './tasks.js';
import {MCPTasks} from './mcptasks.js';
import {Fleet} from './fleet.js';
import {Secrets} from './secrets.js';
import {Connections} from './connections.js';
import {debounce, setText} from './util.js';

const $ = (id) => document.getElementById(id);

const banner = $('banner');
function say(text) {
  banner.hidden = !text;
  setText(banner, text || '');
}

// --- approvals ------------------------------------------------------------

const approvals = new Approvals({
  section: $('approvals'),
  cards: $('approval-cards'),
  count: $('approvals-count'),
  onCount: (n) => { document.title = n ? `(${n}) toolmux` : 'toolmux'; },
});

// --- the live view and the stream ----------------------------------------

const liveFilter = $('live-filter');
const liveKind = $('live-kind');

const live = new Live({
  rows: $('live-rows'),
  stats: $('live-stats'),
  empty: $('live-empty'),
  capped: $('live-capped'),
  onLoadRange: (from, to) => readRange(from, to, (env) => live.handle(env, {replayed: true})),
  onFilterTask: (task) => {
    liveFilter.value = task;
    live.setFilter(task, liveKind.value);
  },
});

const refilter = debounce(() => live.setFilter(liveFilter.value, liveKind.value), 120);
liveFilter.addEventListener('input', refilter);
liveKind.addEventListener('change', refilter);
$('live-clear').addEventListener('click', () => live.clear());

// "Load earlier events" replays the 500 events before the oldest one the
// page has (or before the gateway's last id, which heartbeats tell).
const earlier = $('live-earlier');
let earliestAsked = 0;
function earlierRange() {
  const below = earliestAsked || live.minId || (live.serverLastId ? live.serverLastId + 1 : 0);
  const to = below - 1;
  return to >= 1 ? [Math.max(1, to - 499), to] : null;
}
earlier.addEventListener('click', async () => {
  const r = earlierRange();
  if (!r) return;
  earlier.disabled = true;
  setText(earlier, 'Loading…');
  try {
    await readRange(r[0], r[1], (env) => live.handle(env, {replayed: true}));
    earliestAsked = r[0];
  } catch (e) {
    say(`Could not load earlier events: ${e.message}`);
  }
  setText(earlier, 'Load earlier events');
  earlier.disabled = !earlierRange();
});
function updateEarlier() {
  if (earlier.textContent !== 'Loading…') earlier.disabled = !earlierRange();
}
setInterval(updateEarlier, 1000);

const conn = $('conn');
const pauseBtn = $('pause');
let reconnectAt = 0;
let lastStatus = '';

function showStatus(status, detail = {}) {
  conn.dataset.state = status;
  reconnectAt = status === 'reconnecting' ? detail.until : 0;
  conn.title = detail.error ? `The event stream: ${detail.error}` : 'The event stream /api/events';
  switch (status) {
    case 'connecting': setText(conn, 'connecting…'); break;
    case 'live': setText(conn, 'live'); break;
    case 'paused': setText(conn, 'paused'); break;
    case 'unauthorized': setText(conn, loginWhere ? 'log in needed' : 'token needed'); break;
    case 'reconnecting': tickStatus(); break;
    default: setText(conn, status);
  }
  setText(pauseBtn, status === 'paused' ? 'Resume' : 'Pause');
  if (status === 'live' && lastStatus !== 'live') {
    // Answers given while the page was away are not replayed as a list:
    // read the queue again.
    approvals.refresh();
    // A gateway that could not be asked before (down, or a token
    // missing) may be a fleet's, or keep users' secrets.
    if (!fleet.present) fleet.probe().then((yes) => { if (yes) showTab(); });
    if (!secrets.present) secrets.probe().then((yes) => { if (yes) showTab(); });
    if (!connections.present) connections.probe().then((yes) => { if (yes) showTab(); });
    say('');
  }
  if (status === 'reconnecting' && detail.error) say(`The event stream is down (${detail.error}); the page reconnects by itself and resumes where it stopped.`);
  lastStatus = status;
}
function tickStatus() {
  if (!reconnectAt) return;
  setText(conn, `reconnecting in ${Math.max(0, Math.ceil((reconnectAt - Date.now()) / 1000))}s`);
}
setInterval(tickStatus, 1000);

// The tasks list follows the calls while it is shown.
const onTasks = () => location.hash === '#tasks' || location.hash.startsWith('#tasks/');
const tasksSoon = debounce(() => { if (onTasks()) { tasks.refresh({detail: false}); mcpTasks.refresh(); } }, 1000);

// The open task follows its own events while it runs (a fleet run opened
// from the Fleet tab): read again at most every 700 ms, not once per
// event (a message streams hundreds).
let openTimer = 0;
let openEnded = false;
function openSoon(ended) {
  openEnded = openEnded || ended;
  if (openTimer) return;
  openTimer = setTimeout(() => {
    openTimer = 0;
    const e = openEnded;
    openEnded = false;
    if (onTasks()) tasks.refreshOpen({ended: e});
  }, 700);
}

// The page's stream attaches it as an approver (?approver=1): while it is
// open, calls that need approval wait here for an answer; without any
// page open, the gateway refuses them at once.
const stream = new EventStream({
  url: '/api/events?approver=1',
  onEvent: (env) => {
    live.handle(env);
    if (earlier.disabled) updateEarlier();
    if (env.event === 'approval_request' || env.event === 'approval_resolved') approvals.refreshSoon();
    if (env.event === 'end_of_workflow' || (env.event === 'tool_state' && ['success', 'error', 'cancelled'].includes(env.data && env.data.state))) tasksSoon();
    if (onTasks() && tasks.followsOpen(env.task)) openSoon(env.event === 'end_of_workflow');
    if (env.event === 'start_of_workflow' || env.event === 'end_of_workflow') fleet.nudge();
  },
  onStatus: showStatus,
  onClock: (c) => live.clock(c),
});

conn.addEventListener('click', () => { if (stream.status === 'reconnecting') stream.start(); });
pauseBtn.addEventListener('click', () => {
  if (stream.status === 'paused') stream.start();
  else stream.pause();
});

// --- catalog, call form, tasks --------------------------------------------

const catalog = new Catalog({
  servers: $('servers'), serversError: $('servers-error'), serversRefresh: $('servers-refresh'),
  endpoints: $('endpoints'),
  tools: $('tools'), toolsError: $('tools-error'), toolsCount: $('tools-count'),
  toolsFilter: $('tools-filter'), toolsServer: $('tools-server'), toolsApproval: $('tools-approval'),
  callForm: $('call-form'), callTool: $('call-tool'), callDesc: $('call-desc'), callArgs: $('call-args'),
  callArgsError: $('call-args-error'), callTask: $('call-task'), callSubmit: $('call-submit'),
  callReset: $('call-reset'), callSchema: $('call-schema'), callResult: $('call-result'),
});

const tasks = new Tasks({
  table: $('tasks'), empty: $('tasks-empty'), error: $('tasks-error'), detail: $('task-detail'),
  status: $('tasks-status'), refresh: $('tasks-refresh'),
  onFollow: (id) => {
    liveFilter.value = id;
    live.setFilter(id, liveKind.value);
    location.hash = '#live';
  },
});

const mcpTasks = new MCPTasks({card: $('mcp-tasks-card'), table: $('mcp-tasks'), error: $('mcp-tasks-error')});
$('tasks-refresh').addEventListener('click', () => mcpTasks.refresh());

// The Fleet tab, on a fleet's gateway only (GET /api/fleet answers 200).
const fleet = new Fleet({
  tab: document.querySelector('[data-tab="fleet"]'), panel: $('tab-fleet'), counts: $('fleet-counts'), workers: $('fleet-workers'),
  count: $('fleet-workers-count'), empty: $('fleet-empty'), error: $('fleet-error'), updated: $('fleet-updated'),
  recent: $('fleet-recent'), recentEmpty: $('fleet-recent-empty'),
});

// The Secrets tab, where some server takes users' own secrets.
const secrets = new Secrets({tab: document.querySelector('[data-tab="secrets"]'), panel: $('tab-secrets'),
  table: $('secrets'), error: $('secrets-error')});

// The Connections tab, where some server takes users' own OAuth
// authorizations.
const connections = new Connections({tab: document.querySelector('[data-tab="connections"]'), panel: $('tab-connections'),
  table: $('connections'), error: $('connections-error')});

// --- tabs -----------------------------------------------------------------

const TABS = ['live', 'catalog', 'tasks', 'call', 'fleet', 'secrets', 'connections'];
// showTab shows the tab the address names: #NAME, or #tasks/ID for one
// task (the links of the Fleet tab's runs).
function showTab() {
  const [first, ...rest] = location.hash.slice(1).split('/');
  let name = TABS.includes(first) ? first : 'live';
  if (name === 'fleet' && !fleet.present) name = 'live';
  if (name === 'secrets' && !secrets.present) name = 'live';
  if (name === 'connections' && !connections.present) name = 'live';
  let taskID = '';
  if (name === 'tasks' && rest.length) {
    try { taskID = decodeURIComponent(rest.join('/')); } catch { taskID = ''; }
  }
  for (const panel of document.querySelectorAll('[data-tab-panel]')) panel.hidden = panel.dataset.tabPanel !== name;
  for (const a of document.querySelectorAll('[data-tab]')) {
    if (a.dataset.tab === name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (name === 'catalog') catalog.refresh();
  if (name === 'call' && !catalog.loaded) catalog.refresh();
  if (name === 'tasks') {
    if (taskID) tasks.show(taskID);
    else tasks.refresh();
    mcpTasks.refresh();
  }
  fleet.show(name === 'fleet');
  if (name === 'secrets') secrets.refresh();
  if (name === 'connections') connections.refresh();
}
window.addEventListener('hashchange', showTab);

// --- the token --------------------------------------------------------------

const dialog = $('token-dialog');
const tokenInput = $('token-input');
function askToken() {
  if (dialog.open) return;
  tokenInput.value = getToken();
  dialog.showModal();
  tokenInput.focus();
}
// --- logging in ---------------------------------------------------------------

// A gateway with a login for the page says where in its 401s: the page
// offers to log in there rather than asking for a token (which the Token
// button still takes: an API key pasted works as before).
const loginLink = $('login');
const who = $('who');
const logoutBtn = $('logout');
let loginWhere = '';
onUnauthorized(({login}) => {
  showCaller(null);
  if (login) {
    loginWhere = login;
    loginLink.href = login;
    loginLink.hidden = false;
    if (conn.dataset.state === 'unauthorized') setText(conn, 'log in needed');
    say('Log in to use this gateway.');
    return;
  }
  say('This gateway wants a bearer token.');
  askToken();
});

// showCaller shows who the page is (the caller /api/info names), and Log
// out for a session of the page's login.
function showCaller(caller) {
  who.hidden = !caller;
  setText(who, caller ? caller.name : '');
  who.title = caller ? `Signed in as ${caller.name}${caller.groups && caller.groups.length ? ` (groups: ${caller.groups.join(', ')})` : ''}` : '';
  logoutBtn.hidden = !(caller && caller.method === 'session');
  if (caller) loginLink.hidden = true;
}
logoutBtn.addEventListener('click', async () => {
  try {
    await logout();
  } catch (e) {
    say(`Could not log out: ${e.message}`);
    return;
  }
  // Everything the page shows was the session's: start again.
  location.reload();
});
$('token-btn').addEventListener('click', askToken);
$('token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  dialog.close();
  setToken(tokenInput.value.trim());
});
$('token-clear').addEventListener('click', () => {
  tokenInput.value = '';
  dialog.close();
  setToken('');
});
$('token-cancel').addEventListener('click', () => dialog.close());
onTokenChange(() => {
  say('');
  stream.pause();
  startStream();
  approvals.refresh();
  Promise.allSettled([fleet.probe(), secrets.probe(), connections.probe()]).finally(showTab);
});

// --- start ------------------------------------------------------------------

// RECENT_EVENTS is how many of a gateway's last events a page opened on
// it shows: as many as "Load earlier events" reads at a time, about 80
// tool calls, so that a page opened after the gateway worked is not
// empty, and a long history is not read at every load.
const RECENT_EVENTS = 500;

// startStream asks what the gateway is first: a page of an agent run
// (toolmux run --serve) reads the whole run from its first event, however
// late it was opened; a gateway's page resumes RECENT_EVENTS before the
// gateway's last event, so it shows the recent past, then what happens.
async function startStream() {
  try {
    const info = await api('/api/info');
    showCaller(info && info.caller);
    if (!stream.lastEventId && info && info.run && Number.isInteger(info.run.after_event)) {
      stream.lastEventId = String(info.run.after_event);
    } else if (!stream.lastEventId && info && !info.run && Number.isInteger(info.last_event_id) && info.last_event_id > 0) {
      stream.lastEventId = String(Math.max(0, info.last_event_id - RECENT_EVENTS));
    }
  } catch { /* an older gateway, or a token needed: start live */ }
  stream.start();
}

startStream();
approvals.refresh();
showTab();
// Once the gateway has said whether it is a fleet's, keeps users' secrets
// or connects on their behalf, the address may name the Fleet tab
// (#fleet), the Secrets tab (#secrets) or the Connections tab
// (#connections), hidden until now.
fleet.probe().then((yes) => { if (yes) showTab(); });
secrets.probe().then((yes) => { if (yes) showTab(); });
connections.probe().then((yes) => { if (yes) showTab(); });
