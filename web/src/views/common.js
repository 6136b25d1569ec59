// Pieces the sandbox and agent pages share.
import { h, when } from '../dom.js';

// details renders [label, value] pairs; empty values are left out.
export function details(rows) {
  return h(
    'dl',
    { class: 'details' },
    rows.filter(([, v]) => v !== '' && v !== undefined && v !== null).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]),
  );
}

export function conditionsTable(conds) {
  if (!conds?.length) return h('p', { class: 'empty' }, 'No conditions reported.');
  return h(
    'table',
    { class: 'list conditions' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Type'), h('th', {}, 'Status'), h('th', {}, 'Reason'), h('th', {}, 'Since'))),
    h(
      'tbody',
      {},
      conds.map((c) =>
        h(
          'tr',
          { title: c.message || '' },
          h('td', {}, c.type),
          h('td', {}, h('span', { class: `cond cond-${String(c.status).toLowerCase()}` }, c.status)),
          h('td', {}, c.reason || '', c.message ? h('div', { class: 'muted small' }, c.message) : null),
          h('td', {}, when(c.lastTransitionTime)),
        ),
      ),
    ),
  );
}

export function eventsBlock(evs) {
  if (!evs.length) return h('p', { class: 'empty' }, 'No events.');
  return h(
    'ul',
    { class: 'events compact' },
    evs.slice(0, 30).map((e) => h('li', { class: e.type === 'Warning' ? 'warning' : '' }, when(e.timestamp), h('span', { class: 'reason' }, e.reason), h('span', { class: 'message' }, e.message))),
  );
}
