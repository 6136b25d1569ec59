// The overview: human requests, pools, sandboxes, agents and events.
import { agentHref, badge, fill, h, sandboxHref, sync, when } from '../dom.js';
import { pendingRequests, poolOf, state } from '../store.js';
import { RequestForms } from './hitl.js';

const byName = (a, b) => a.metadata.name.localeCompare(b.metadata.name);

export function overviewView(main) {
  const forms = new RequestForms();
  const hitlCount = h('span', { class: 'count' });
  const hitlList = h('div', { class: 'hitl-list' });
  const hitl = h('section', { id: 'hitl', hidden: true }, h('h2', {}, 'Waiting for a person ', hitlCount), hitlList);
  const pools = h('section', { id: 'pools' });
  const sandboxes = h('section', { id: 'sandboxes' });
  const agents = h('section', { id: 'agents' });
  const events = h('section', { id: 'events' });
  main.append(hitl, pools, h('div', { class: 'cols' }, sandboxes, agents), events);
  return {
    update() {
      const reqs = pendingRequests();
      forms.keep(reqs);
      hitl.hidden = reqs.length === 0;
      hitlCount.textContent = String(reqs.length);
      sync(hitlList, reqs.map((r) => forms.card(r)));
      fill(pools, h('h2', {}, 'Pools'), poolCards());
      fill(sandboxes, h('h2', {}, 'Sandboxes'), sandboxTable([...state.sandboxes.values()]));
      fill(agents, h('h2', {}, 'Agents'), agentTable([...state.agents.values()]));
      fill(events, h('h2', {}, 'Events'), eventList(state.events.slice(-50).reverse(), true));
    },
  };
}

export function hitlView(main) {
  const forms = new RequestForms();
  const list = h('div', { class: 'hitl-list' });
  const note = h('p', { class: 'empty' });
  main.append(
    h(
      'section',
      { id: 'hitl' },
      h('h1', {}, 'Human requests'),
      h('p', { class: 'muted' }, 'Agents that asked a person a question wait here until it is answered. Open the live view to watch the desktop or take control, then answer.'),
      note,
      list,
    ),
  );
  return {
    update() {
      const reqs = pendingRequests();
      forms.keep(reqs);
      note.hidden = reqs.length > 0;
      note.textContent = state.loaded.has('agents') ? 'No agent is waiting for a person.' : 'Loading…';
      sync(list, reqs.map((r) => forms.card(r)));
    },
  };
}

function loading() {
  return h('p', { class: 'muted' }, 'Loading…');
}

function poolCards() {
  if (!state.loaded.has('sandboxpools')) return loading();
  const pools = [...state.sandboxpools.values()].sort(byName);
  if (!pools.length) return h('p', { class: 'empty' }, 'No pools. Create one with hvkube apply -f pool.yaml.');
  return h(
    'div',
    { class: 'pool-grid' },
    pools.map((p) => {
      const s = p.status || {};
      const desired = s.desired ?? p.spec?.replicas ?? 0;
      const ready = s.ready ?? 0;
      const ok = ready >= desired;
      return h(
        'div',
        { class: 'card pool', dataset: { pool: p.metadata.name } },
        h('div', { class: 'pool-head' }, h('span', { class: 'strong' }, p.metadata.name), h('span', { class: `pill ${ok ? 'ok' : 'warn'}` }, ok ? 'ready' : 'filling')),
        h(
          'dl',
          { class: 'counts' },
          stat('READY', `${ready}/${desired}`, 'ready sandboxes / how many the pool aims for'),
          stat('WARM', s.warm ?? 0, `idle, ${p.spec?.warmTier || 'paused'}, waiting for an agent`),
          stat('BUSY', s.busy ?? 0, 'running an agent'),
          stat('REPLICAS', s.replicas ?? 0, 'sandboxes the pool has now'),
        ),
        bar(ready, desired),
      );
    }),
  );
}

function bar(ready, desired) {
  const fillEl = h('span', { class: 'bar-fill' });
  // Set through the CSSOM: the page's CSP allows no inline style attributes.
  fillEl.style.width = (desired > 0 ? Math.min(100, Math.round((100 * ready) / desired)) : 100) + '%';
  return h('div', { class: 'bar', title: `${ready} of ${desired} ready` }, fillEl);
}

function stat(label, value, title) {
  return h('div', { title }, h('dt', {}, label), h('dd', {}, String(value)));
}

export function sandboxTable(list) {
  if (!state.loaded.has('sandboxes')) return loading();
  if (!list.length) return h('p', { class: 'empty' }, 'No sandboxes.');
  return h(
    'table',
    { class: 'list' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Phase'), h('th', {}, 'Pool'), h('th', {}, 'Agent'), h('th', {}, 'Age'))),
    h(
      'tbody',
      {},
      list.sort(byName).map((sb) =>
        h(
          'tr',
          { dataset: { sandbox: sb.metadata.name } },
          h('td', {}, h('a', { href: sandboxHref(sb.metadata.name) }, sb.metadata.name)),
          h('td', {}, badge(sb.status?.phase), sb.status?.control ? h('span', { class: 'pill warn', title: `${sb.status.control.holder} controls the input` }, 'person') : null),
          h('td', {}, poolOf(sb) || h('span', { class: 'muted' }, '—')),
          h('td', {}, sb.status?.currentAgent ? h('a', { href: agentHref(sb.status.currentAgent) }, sb.status.currentAgent) : h('span', { class: 'muted' }, 'idle')),
          h('td', {}, when(sb.metadata.creationTimestamp)),
        ),
      ),
    ),
  );
}

function agentTable(list) {
  if (!state.loaded.has('agents')) return loading();
  if (!list.length) return h('p', { class: 'empty' }, 'No agents.');
  // Running and waiting first, then the newest.
  const rank = (a) => (a.status?.humanRequest && !a.status.humanRequest.answeredAt ? 0 : ['Running', 'Scheduled', 'Pending'].includes(a.status?.phase) ? 1 : 2);
  list.sort((a, b) => rank(a) - rank(b) || new Date(b.metadata.creationTimestamp) - new Date(a.metadata.creationTimestamp));
  return h(
    'table',
    { class: 'list' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Phase'), h('th', {}, 'Sandbox'), h('th', {}, 'Attempts'), h('th', {}, 'Age'))),
    h(
      'tbody',
      {},
      list.map((a) => {
        const waiting = a.status?.humanRequest && !a.status.humanRequest.answeredAt;
        return h(
          'tr',
          { dataset: { agent: a.metadata.name } },
          h('td', {}, h('a', { href: agentHref(a.metadata.name) }, a.metadata.name)),
          h('td', {}, badge(a.status?.phase), waiting ? h('span', { class: 'pill warn' }, 'waiting for a person') : null),
          h('td', {}, a.status?.sandbox ? h('a', { href: sandboxHref(a.status.sandbox) }, a.status.sandbox) : h('span', { class: 'muted' }, '—')),
          h('td', {}, String(a.status?.attempts ?? 0)),
          h('td', {}, when(a.metadata.creationTimestamp)),
        );
      }),
    ),
  );
}

// eventList shows events newest first; withObject adds the object's name.
export function eventList(events, withObject) {
  if (!state.loaded.has('events')) return loading();
  if (!events.length) return h('p', { class: 'empty' }, 'No events yet.');
  return h(
    'ul',
    { class: 'events' },
    events.map((e) =>
      h(
        'li',
        { class: e.type === 'Warning' ? 'warning' : '' },
        when(e.timestamp),
        withObject ? objectLink(e.involvedObject) : null,
        h('span', { class: 'reason' }, e.reason),
        h('span', { class: 'message' }, e.message),
      ),
    ),
  );
}

function objectLink(o) {
  if (!o) return null;
  const text = `${o.kind.toLowerCase()}/${o.name}`;
  if (o.kind === 'Sandbox') return h('a', { class: 'obj', href: sandboxHref(o.name) }, text);
  if (o.kind === 'Agent') return h('a', { class: 'obj', href: agentHref(o.name) }, text);
  return h('span', { class: 'obj' }, text);
}
