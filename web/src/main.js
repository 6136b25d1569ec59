// The hvkube dashboard: hash routes #/ (overview), #/hitl (human requests),
// #/sandboxes/NAME and #/agents/NAME. State comes from the API's watches.
import { ApiError, displayTokenFor, getJSON, onUnauthorized, setToken, takeTokenFromURL, token } from './api.js';
import { fill, h } from './dom.js';
import { connection, pendingRequests, start, state, stop, subscribe } from './store.js';
import { overviewView, hitlView } from './views/overview.js';
import { liveOnlyView, sandboxView } from './views/sandbox.js';
import { agentView } from './views/agent.js';

const main = document.getElementById('main');
let view = null; // {update(), destroy()}
let started = false;

function route() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const parts = hash.split('?')[0].split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] === 'sandboxes' && parts[1]) return { page: 'sandbox', name: parts[1] };
  if (parts[0] === 'agents' && parts[1]) return { page: 'agent', name: parts[1] };
  if (parts[0] === 'hitl') return { page: 'hitl' };
  return { page: 'overview' };
}

function render() {
  view?.destroy?.();
  view = null;
  main.replaceChildren();
  const r = route();
  document.querySelectorAll('[data-nav]').forEach((a) => a.classList.toggle('active', a.dataset.nav === r.page));
  if (r.page === 'sandbox') view = sandboxView(main, r.name);
  else if (r.page === 'agent') view = agentView(main, r.name);
  else if (r.page === 'hitl') view = hitlView(main);
  else view = overviewView(main);
  view.update();
  window.scrollTo(0, 0);
}

function updateChrome() {
  const c = connection();
  const conn = document.getElementById('conn');
  conn.textContent = c;
  conn.className = 'conn conn-' + c;
  const n = pendingRequests().length;
  const count = document.getElementById('hitl-count');
  count.hidden = n === 0;
  count.textContent = String(n);
  document.title = n ? `(${n}) hvkube` : 'hvkube';
}

// askToken shows the token form; the app starts once the server takes it.
function askToken(message) {
  stop();
  started = false;
  view?.destroy?.();
  view = null;
  document.getElementById('signout').hidden = true;
  document.getElementById('conn').hidden = true;
  const input = h('input', { type: 'password', name: 'token', id: 'token-input', autocomplete: 'off', required: true, placeholder: 'token', autofocus: true });
  const err = h('p', { class: 'error', id: 'token-error', role: 'alert' }, message || '');
  const form = h(
    'form',
    { class: 'card token-form', id: 'token-form' },
    h('h1', {}, 'This server needs a token'),
    h('p', {}, 'Enter the token the server was started with (its --token-file, or HVKUBE_TOKEN). It is kept in this tab only.'),
    input,
    h('button', { type: 'submit', class: 'primary' }, 'Open dashboard'),
    err,
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    setToken(input.value.trim());
    await boot();
  });
  fill(main);
  // A link with a display token shows that sandbox's screen even so.
  const r = route();
  if (r.page === 'sandbox' && displayTokenFor(r.name)) {
    view = liveOnlyView(main, r.name);
    form.querySelector('h1').textContent = 'The rest needs the server\u2019s token';
  } else input.focus();
  main.append(form);
}

// boot checks the token against the server, then starts the watches.
async function boot() {
  let info;
  try {
    info = await getJSON('/version');
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) {
      const had = token() !== '';
      setToken('');
      askToken(had ? 'The server refused that token.' : '');
      return;
    }
    fill(main, h('div', { class: 'card error' }, `Cannot reach the server: ${err.message}`), h('button', { onclick: () => boot() }, 'Retry'));
    return;
  }
  document.getElementById('server-info').textContent = [info.version && `hvkube ${info.version}`, info.backend && `${info.backend}${info.accel ? ' · ' + info.accel : ''}`, info.node].filter(Boolean).join(' · ');
  document.getElementById('signout').hidden = !token();
  document.getElementById('conn').hidden = false;
  started = true;
  start();
  render();
}

onUnauthorized(() => {
  if (started) askToken('The server refused the token: enter it again.');
});

subscribe(() => {
  updateChrome();
  if (started) view?.update();
});

window.addEventListener('hashchange', () => {
  takeTokenFromURL();
  if (started) render();
});

document.getElementById('signout').addEventListener('click', () => {
  setToken('');
  askToken('');
});

// Relative times ("3m ago") stay current.
setInterval(() => started && view?.update(), 10_000);

takeTokenFromURL();
boot();
// For tests and the console.
window.hvkube = { state };
