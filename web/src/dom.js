// Small DOM helpers. Text from the server only ever becomes text nodes or
// attribute values, never markup.

// h builds an element: h('a', {href: '#/', class: 'x', onclick: fn}, 'text', child).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

// fill replaces el's children.
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// ago renders a time as "5s ago", "3m ago", "2h ago", "4d ago".
export function ago(t) {
  if (!t) return '';
  const s = Math.max(0, (Date.now() - new Date(t).getTime()) / 1000);
  if (s < 60) return `${Math.floor(s)}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

// when renders a time with its full date as the tooltip.
export function when(t) {
  if (!t) return h('span', { class: 'muted' }, '—');
  return h('time', { datetime: t, title: new Date(t).toLocaleString() }, ago(t));
}

// duration renders seconds as "45s", "3m 12s", "1h 4m".
export function duration(sec) {
  if (sec === undefined || sec === null) return '';
  sec = Math.round(sec);
  if (sec < 60) return `${sec}s`;
  if (sec < 3600) return `${Math.floor(sec / 60)}m ${sec % 60}s`;
  return `${Math.floor(sec / 3600)}h ${Math.floor((sec % 3600) / 60)}m`;
}

// badge shows a phase (Running, Failed, …) in its colour.
export function badge(phase, extra) {
  const p = phase || 'Pending'; // not yet reconciled
  return h('span', { class: `badge phase-${p.toLowerCase()}${extra ? ' ' + extra : ''}` }, p);
}

export function link(href, text) {
  return h('a', { href }, text);
}

export const sandboxHref = (name) => `#/sandboxes/${encodeURIComponent(name)}`;
export const agentHref = (name) => `#/agents/${encodeURIComponent(name)}`;

// sync makes children el's children, moving as few nodes as it can, so that
// a form being typed in keeps its focus across live updates.
export function sync(el, children) {
  const keep = new Set(children);
  for (const c of [...el.children]) if (!keep.has(c)) c.remove();
  children.forEach((c, i) => {
    if (el.children[i] !== c) el.insertBefore(c, el.children[i] || null);
  });
}

let flashTimer = null;

// flash shows a short confirmation above the page for a few seconds.
export function flash(text) {
  const el = document.getElementById('flash');
  el.textContent = text;
  el.hidden = false;
  clearTimeout(flashTimer);
  flashTimer = setTimeout(() => (el.hidden = true), 6000);
}
