// Human-in-the-loop: an agent's question, and the form that answers it.
import { enc, postJSON } from '../api.js';
import { agentHref, flash, h, sandboxHref, when } from '../dom.js';

const NAME_KEY = 'hvkube.name';

// person is the name people give themselves in answers and take-overs.
export function person() {
  return localStorage.getItem(NAME_KEY) || '';
}

export function setPerson(n) {
  localStorage.setItem(NAME_KEY, n);
}

// nameInput edits the person's name, shared by every form on the page.
export function nameInput() {
  const el = h('input', { type: 'text', class: 'name', placeholder: 'your name', 'aria-label': 'your name', value: person(), maxlength: 128 });
  el.addEventListener('change', () => setPerson(el.value.trim()));
  return el;
}

// RequestForms keeps one card per request, so that typing survives the
// re-renders live updates cause.
export class RequestForms {
  constructor() {
    this.cards = new Map();
  }

  // card returns the card for item {agent, sandbox, request}.
  card(item, { showSandbox = true } = {}) {
    const key = item.agent + '/' + item.request.id;
    let c = this.cards.get(key);
    if (!c) {
      c = requestCard(item, showSandbox);
      this.cards.set(key, c);
    }
    c.querySelector('.asked').replaceChildren('asked ', when(item.request.askedAt));
    return c;
  }

  // keep drops the cards of requests no longer shown.
  keep(items) {
    const live = new Set(items.map((i) => i.agent + '/' + i.request.id));
    for (const k of this.cards.keys()) if (!live.has(k)) this.cards.delete(k);
  }
}

function requestCard(item, showSandbox) {
  const answer = h('textarea', { name: 'answer', rows: 2, required: true, maxlength: 65536, placeholder: 'Your answer to the agent' });
  const status = h('span', { class: 'form-status', role: 'status' });
  const button = h('button', { type: 'submit', class: 'primary' }, 'Answer');
  const form = h(
    'form',
    { class: 'hitl-card card', dataset: { agent: item.agent, request: item.request.id } },
    h(
      'div',
      { class: 'hitl-head' },
      h('a', { href: agentHref(item.agent), class: 'strong' }, item.agent),
      item.sandbox && showSandbox ? [' on ', h('a', { href: sandboxHref(item.sandbox) }, item.sandbox)] : null,
      h('span', { class: 'asked muted' }),
    ),
    h('blockquote', { class: 'question' }, item.request.question),
    answer,
    h('div', { class: 'row' }, nameInput(), button, item.sandbox && showSandbox ? h('a', { href: sandboxHref(item.sandbox), class: 'button' }, 'Open live view') : null, status),
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    button.disabled = true;
    status.className = 'form-status';
    status.textContent = 'Sending…';
    try {
      await postJSON(`/api/v1/hitl/${enc(item.agent)}/respond`, { id: item.request.id, answer: answer.value, by: person() || 'dashboard' });
      status.textContent = 'Answered';
      form.classList.add('answered');
      flash(`Answer sent to ${item.agent}.`);
    } catch (err) {
      status.className = 'form-status error';
      status.textContent = err.status === 404 ? `Answering needs POST /api/v1/hitl/{agent}/respond, which this server does not serve (${err.message})` : err.message;
      button.disabled = false;
    }
  });
  return form;
}
