// The API client: the token, JSON calls, authenticated images and files,
// and watches.

const TOKEN_KEY = 'hvkube.token';

// token is the server's bearer token, kept for this tab's session only.
export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// isDisplayToken reports whether t is a display token (a JWT the server
// minted for one sandbox's live view) rather than the server's token.
export function isDisplayToken(t) {
  return t.startsWith('eyJ') && t.split('.').length === 3;
}

const displayKey = (sandbox) => 'hvkube.display.' + sandbox;

// displayTokenFor returns the display token a link brought for sandbox,
// while it is valid.
export function displayTokenFor(sandbox) {
  const t = sessionStorage.getItem(displayKey(sandbox));
  if (!t) return '';
  try {
    const claims = JSON.parse(atob(t.split('.')[1].replace(/-/g, '+').replace(/_/g, '/')));
    if (claims.sub === sandbox && claims.exp * 1000 > Date.now() + 5000) return t;
  } catch {
    // not readable: dropped below
  }
  forgetDisplayToken(sandbox);
  return '';
}

export function forgetDisplayToken(sandbox) {
  sessionStorage.removeItem(displayKey(sandbox));
}

// takeTokenFromURL reads a token handed over in the address's fragment
// (/#token=T, or /#/sandboxes/NAME?token=T), keeps it and removes it from
// the address bar and the history entry. The server's token is kept for
// every call; a display token (what `hvkube console` links carry) only for
// its sandbox's live view.
export function takeTokenFromURL() {
  const hash = location.hash.replace(/^#/, '');
  const [route, query = ''] = hash.includes('?') ? hash.split(/\?(.*)/s) : hash.startsWith('/') ? [hash, ''] : ['', hash];
  const params = new URLSearchParams(query);
  const t = params.get('token');
  if (t === null) return;
  const sandbox = /^\/sandboxes\/([^/?]+)/.exec(route);
  if (isDisplayToken(t)) {
    if (sandbox) sessionStorage.setItem(displayKey(decodeURIComponent(sandbox[1])), t);
  } else setToken(t);
  params.delete('token');
  const rest = params.toString();
  const clean = (route || '/') + (rest ? '?' + rest : '');
  history.replaceState(null, '', location.pathname + location.search + '#' + clean);
}

// ApiError carries the server's {"error","field"} and the status.
export class ApiError extends Error {
  constructor(status, body, path) {
    super(body?.error || `${status} from ${path}`);
    this.status = status;
    this.field = body?.field;
  }
}

// listeners for a refused token (401): the app asks for a new one.
const unauthorized = new Set();
export function onUnauthorized(fn) {
  unauthorized.add(fn);
}

function headers(extra) {
  const hd = new Headers(extra);
  const t = token();
  if (t) hd.set('Authorization', 'Bearer ' + t);
  return hd;
}

// request sends a same-origin call with the token and returns the response,
// throwing ApiError for an error status.
export async function request(path, { method = 'GET', body, signal, headers: extra } = {}) {
  const init = { method, headers: headers(extra), signal, credentials: 'omit', cache: 'no-store' };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers.set('Content-Type', 'application/json');
  }
  const resp = await fetch(path, init);
  if (!resp.ok) {
    let b = null;
    try {
      b = await resp.json();
    } catch {
      // not JSON
    }
    if (resp.status === 401) unauthorized.forEach((fn) => fn());
    throw new ApiError(resp.status, b, path);
  }
  return resp;
}

export async function getJSON(path, opts) {
  return (await request(path, opts)).json();
}

export async function postJSON(path, body, opts) {
  const resp = await request(path, { ...opts, method: 'POST', body });
  const text = await resp.text();
  return text ? JSON.parse(text) : null;
}

// blobURL fetches an image or file with the token (an <img src> cannot
// send it) and returns an object URL for it; the caller revokes it.
export async function blobURL(path, opts) {
  const resp = await request(path, opts);
  return URL.createObjectURL(await resp.blob());
}

export const enc = encodeURIComponent;

// filePath is the API path of one of an agent's files ("screenshots/x.png").
export function filePath(agent, rel) {
  return `/api/v1/agents/${enc(agent)}/files/${rel.split('/').map(enc).join('/')}`;
}

const IDLE_LIMIT = 75_000; // the server sends a line at least every 30 s
const MAX_BACKOFF = 15_000;

// watch follows GET /api/v1/{resource}?watch=true and calls
//   onReset(objects)          with the full list (at the start, and after
//                             the server could not resume)
//   onEvent(type, object)     with each later change
//   onState(state, detail)    'live' | 'connecting' | 'error'
// It resumes from the last resourceVersion after a dropped connection,
// lists again when the server answers 410 (or ERROR), and retries with
// backoff. Returns a stop function.
export function watch(resource, { onReset, onEvent, onState, query = '' }) {
  let stopped = false;
  let rv = null; // where to resume; null = list again
  let backoff = 1000;
  let ctrl = null;
  let idleTimer = null;
  const events = resource === 'events';

  async function run() {
    while (!stopped) {
      ctrl = new AbortController();
      const params = new URLSearchParams(query);
      params.set('watch', 'true');
      if (!events) params.set('allowWatchBookmarks', 'true');
      if (rv !== null) params.set('resourceVersion', rv);
      const path = `/api/v1/${resource}?${params}`;
      let initial = rv === null ? [] : null; // collecting the listed objects
      const arm = () => {
        clearTimeout(idleTimer);
        idleTimer = setTimeout(() => ctrl.abort(), IDLE_LIMIT);
      };
      try {
        onState('connecting');
        arm();
        const resp = await request(path, { signal: ctrl.signal });
        if (events && initial) {
          // The audit log only grows: start empty and add each event.
          onReset([]);
          initial = null;
        }
        onState('live');
        backoff = 1000;
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          arm();
          buf += value;
          let i;
          while ((i = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, i).trim();
            buf = buf.slice(i + 1);
            if (!line) continue; // heartbeat
            const ev = JSON.parse(line);
            if (ev.type === 'ERROR') {
              rv = null; // fell behind: list again
              throw new Error(ev.object?.error || 'watch error');
            }
            const objRV = ev.object?.metadata?.resourceVersion;
            if (ev.type === 'BOOKMARK') {
              if (initial) {
                onReset(initial);
                initial = null;
              }
              rv = objRV;
              continue;
            }
            if (initial && ev.type === 'ADDED') {
              initial.push(ev.object);
              continue;
            }
            if (initial) {
              onReset(initial);
              initial = null;
            }
            onEvent(ev.type, ev.object);
            if (objRV) rv = objRV;
          }
        }
      } catch (err) {
        if (stopped) return;
        if (err instanceof ApiError && err.status === 410) rv = null;
        if (err instanceof ApiError && err.status === 401) {
          onState('error', 'token refused');
          return; // the app asks for a token and starts again
        }
        onState('error', err.message);
      } finally {
        clearTimeout(idleTimer);
      }
      if (stopped) return;
      onState('connecting');
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, MAX_BACKOFF);
    }
  }
  run();
  return () => {
    stopped = true;
    clearTimeout(idleTimer);
    ctrl?.abort();
  };
}
