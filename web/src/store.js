// The live state: pools, sandboxes, agents and recent events, kept current
// by one watch each. Views read it and re-render when it changes.
import { watch } from './api.js';

const MAX_EVENTS = 300;

export const state = {
  sandboxpools: new Map(),
  sandboxes: new Map(),
  agents: new Map(),
  events: [], // oldest first
  loaded: new Set(), // resources whose first list arrived
  conn: new Map(), // resource -> 'live' | 'connecting' | 'error'
};

const listeners = new Set();
let scheduled = false;

// subscribe calls fn (batched) after each change; returns an unsubscribe.
export function subscribe(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function changed() {
  if (scheduled) return;
  scheduled = true;
  setTimeout(() => {
    scheduled = false;
    listeners.forEach((fn) => fn());
  }, 50);
}

// resourceVersions are opaque: events are told apart by name and version,
// and ordered by time.
const keyOf = (e) => `${e?.metadata?.name}/${e?.metadata?.resourceVersion}`;
const timeOf = (e) => Date.parse(e?.timestamp || '') || 0;

let stops = [];

// start opens the watches (again, after a new token).
export function start() {
  stop();
  for (const res of ['sandboxpools', 'sandboxes', 'agents']) {
    stops.push(
      watch(res, {
        onReset(items) {
          const m = state[res];
          m.clear();
          for (const o of items) m.set(o.metadata.name, o);
          state.loaded.add(res);
          changed();
        },
        onEvent(type, o) {
          if (type === 'DELETED') state[res].delete(o.metadata.name);
          else state[res].set(o.metadata.name, o);
          changed();
        },
        onState(s) {
          state.conn.set(res, s);
          changed();
        },
      }),
    );
  }
  stops.push(
    watch('events', {
      query: `limit=${MAX_EVENTS}`,
      onReset() {
        state.events = [];
        state.loaded.add('events');
        changed();
      },
      onEvent(_type, e) {
        const evs = state.events;
        // Keep order by time; duplicates are dropped.
        if (evs.some((x) => keyOf(x) === keyOf(e))) return;
        evs.push(e);
        if (evs.length > 1 && timeOf(evs[evs.length - 2]) > timeOf(e)) {
          evs.sort((a, b) => timeOf(a) - timeOf(b));
        }
        if (evs.length > MAX_EVENTS) evs.splice(0, evs.length - MAX_EVENTS);
        changed();
      },
      onState(s) {
        state.conn.set('events', s);
        changed();
      },
    }),
  );
}

export function stop() {
  stops.forEach((f) => f());
  stops = [];
}

// connection sums up the watches: live when all are.
export function connection() {
  const vals = [...state.conn.values()];
  if (vals.length && vals.every((v) => v === 'live')) return 'live';
  if (vals.includes('error')) return 'reconnecting';
  return 'connecting';
}

// poolOf names the pool that owns a sandbox, if any.
export function poolOf(sb) {
  return sb.metadata.ownerReferences?.find((r) => r.kind === 'SandboxPool')?.name || sb.metadata.labels?.pool || '';
}

// pendingRequests lists the agents' unanswered questions, oldest first.
export function pendingRequests() {
  const out = [];
  for (const a of state.agents.values()) {
    const r = a.status?.humanRequest;
    if (r && !r.answeredAt) out.push({ agent: a.metadata.name, sandbox: a.status?.sandbox || '', request: r });
  }
  return out.sort((x, y) => new Date(x.request.askedAt) - new Date(y.request.askedAt));
}

// eventsFor lists the events about one object, newest first.
export function eventsFor(kind, name) {
  return state.events.filter((e) => e.involvedObject?.kind === kind && e.involvedObject?.name === name).reverse();
}
