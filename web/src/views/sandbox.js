// A sandbox: its live view, a screenshot, run-state buttons, who controls
// the input, its agent's question, conditions and events.
import { blobURL, enc, postJSON } from '../api.js';
import { agentHref, badge, fill, h, sync, when } from '../dom.js';
import { LiveView } from '../live.js';
import { TerminalPane } from '../terminal.js';
import { eventsFor, pendingRequests, poolOf, state } from '../store.js';
import { nameInput, person, RequestForms } from './hitl.js';
import { conditionsTable, details, eventsBlock } from './common.js';

// Phases in which the VM exists and shows a screen.
const SHOWS_SCREEN = ['Running', 'Paused'];

export function sandboxView(main, name) {
  const live = new LiveView(name);
  const forms = new RequestForms();
  const urls = new Set();
  let busy = false;
  let mine = null; // the take-over this page holds: {id}
  let term = null; // the open terminal pane

  const title = h('h1', {}, name, ' ');
  const phase = h('span');
  const notice = h('p', { class: 'notice', role: 'status', id: 'action-status' });
  const button = (label, act, cls) => h('button', { type: 'button', class: cls || '', dataset: { act }, onclick: () => run(act) }, label);
  const buttons = {
    pause: button('Pause', 'pause'),
    resume: button('Resume', 'resume'),
    reset: button('Reset', 'reset'),
    screenshot: button('Screenshot', 'screenshot'),
    terminal: button('Terminal', 'terminal'),
    take: button('Take control', 'take', 'primary'),
    release: button('Hand back control', 'release', 'primary'),
  };
  const control = h('div', { class: 'control-info' });
  const info = h('div');
  const questionBox = h('div', { class: 'hitl-list' });
  const conditions = h('div');
  const events = h('div');
  const shot = h('div', { class: 'screenshot', id: 'screenshot', hidden: true });
  const missing = h('p', { class: 'card error', hidden: true }, `Sandbox ${name} does not exist (any more).`);
  const termSlot = h('div');

  main.append(
    h('div', { class: 'crumbs' }, h('a', { href: '#/' }, 'Overview'), ' / sandboxes'),
    h('div', { class: 'page-head' }, title, phase),
    missing,
    h(
      'div',
      { class: 'toolbar' },
      buttons.pause,
      buttons.resume,
      buttons.reset,
      buttons.screenshot,
      buttons.terminal,
      h('span', { class: 'spacer' }),
      nameInput(),
      buttons.take,
      buttons.release,
    ),
    notice,
    h(
      'div',
      { class: 'split' },
      h('div', { class: 'main-col' }, live.el, shot, termSlot),
      h(
        'div',
        { class: 'side-col' },
        control,
        questionBox,
        h('section', {}, h('h2', {}, 'Details'), info),
        h('section', {}, h('h2', {}, 'Conditions'), conditions),
        h('section', {}, h('h2', {}, 'Events'), events),
      ),
    ),
  );

  function say(text, error) {
    notice.textContent = text;
    notice.className = 'notice' + (error ? ' error' : ' ok');
  }

  async function run(act) {
    if (act === 'terminal') {
      if (term) return term.term?.focus();
      term = new TerminalPane(name, () => {
        term = null;
        update();
      });
      termSlot.append(term.el);
      update();
      term.open();
      return;
    }
    if (busy) return;
    busy = true;
    update();
    const path = `/api/v1/sandboxes/${enc(name)}`;
    try {
      if (act === 'screenshot') {
        say('Taking a screenshot…');
        const url = await blobURL(`${path}/screen`);
        urls.add(url);
        const stamp = new Date().toISOString().replace(/[:.]/g, '-');
        fill(
          shot,
          h('div', { class: 'row' }, h('h2', {}, 'Screenshot'), h('span', { class: 'muted' }, new Date().toLocaleTimeString()), h('a', { href: url, download: `${name}-${stamp}.png`, class: 'button small' }, 'Download'), h('button', { type: 'button', class: 'small', onclick: () => (shot.hidden = true) }, 'Close')),
          h('img', { src: url, alt: `screenshot of ${name}` }),
        );
        shot.hidden = false;
        say('Screenshot taken.');
      } else if (act === 'take') {
        say('Taking control…');
        const sb = state.sandboxes.get(name);
        const body = { action: 'take', holder: person() || 'dashboard' };
        if (sb?.status?.currentAgent) body.agent = sb.status.currentAgent;
        const res = await postJSON(`${path}/control`, body);
        mine = res.control;
        // A display token carrying the take-over lets input through.
        const tok = res.token || (await postJSON(`${path}/display/token`, { control: res.key })).token;
        live.useControl(tok);
        say('You control the input: the agent waits until you hand it back.');
      } else if (act === 'release') {
        const id = mine?.id || state.sandboxes.get(name)?.status?.control?.id;
        await postJSON(`${path}/control`, { action: 'release', id });
        mine = null;
        live.useControl('');
        say('Control handed back.');
      } else {
        say(`${act[0].toUpperCase() + act.slice(1)}…`);
        await postJSON(`${path}/${act}`);
        say(`${act[0].toUpperCase() + act.slice(1)} done.`);
      }
    } catch (err) {
      say(`${act} failed: ${err.message}`, true);
    } finally {
      busy = false;
      update();
    }
  }

  function update() {
    const sb = state.sandboxes.get(name);
    const loaded = state.loaded.has('sandboxes');
    missing.hidden = !loaded || !!sb;
    const st = sb?.status || {};
    const p = st.phase || (loaded ? '' : '…');
    fill(phase, sb ? badge(p) : null);
    live.want(SHOWS_SCREEN.includes(st.phase), sb ? `The live view needs a running sandbox; this one is ${p || 'not started'}.` : '');
    const held = st.control;
    if (mine && held && held.id === mine.id) mine.seen = true;
    if (mine && ((held && held.id !== mine.id) || (!held && mine.seen))) {
      // Released elsewhere: back to view-only.
      mine = null;
      live.useControl('');
    }
    buttons.pause.disabled = busy || st.phase !== 'Running';
    buttons.resume.disabled = busy || !['Paused', 'Saved'].includes(st.phase);
    buttons.reset.disabled = busy || !['Running', 'Paused', 'Saved'].includes(st.phase);
    buttons.screenshot.disabled = busy || !SHOWS_SCREEN.includes(st.phase);
    buttons.terminal.disabled = !!term || st.phase !== 'Running';
    buttons.take.hidden = !!held;
    buttons.take.disabled = busy || st.phase !== 'Running';
    buttons.release.hidden = !held;
    buttons.release.disabled = busy;
    buttons.release.textContent = !held || mine ? 'Hand back control' : `Release ${held.holder}\u2019s control`;
    fill(
      control,
      held
        ? h('div', { class: 'card warn' }, h('strong', {}, mine ? 'You control the input' : `${held.holder} controls the input`), ' since ', when(held.since), held.agent ? [' for ', h('a', { href: agentHref(held.agent) }, held.agent)] : null, '. Agents\u2019 input is refused until control is handed back.')
        : null,
    );
    const reqs = pendingRequests().filter((r) => r.sandbox === name);
    forms.keep(reqs);
    sync(questionBox, reqs.map((r) => forms.card(r, { showSandbox: false })));
    fill(
      info,
      sb
        ? details([
            ['Pool', poolOf(sb) || '—'],
            ['Agent', st.currentAgent ? h('a', { href: agentHref(st.currentAgent) }, st.currentAgent) : 'idle'],
            ['Template', st.template || sb.spec?.templateRef || '—'],
            ['Resolution', st.resolution || sb.spec?.display?.resolution || '—'],
            ['Node', st.node || '—'],
            ['IP address', st.ipAddress || '—'],
            ['Started', when(st.startedAt)],
            ['Ready', when(st.readyAt)],
            ['Reason', st.reason ? `${st.reason}${st.message ? ': ' + st.message : ''}` : st.message || ''],
          ])
        : null,
    );
    fill(conditions, conditionsTable(st.conditions));
    fill(events, eventsBlock(eventsFor('Sandbox', name)));
  }

  return {
    update,
    destroy() {
      live.destroy();
      term?.destroy();
      urls.forEach((u) => URL.revokeObjectURL(u));
    },
  };
}

// liveOnlyView shows a sandbox's screen with the display token a link
// brought, for a viewer who does not have the server's token.
export function liveOnlyView(main, name) {
  const live = new LiveView(name);
  main.append(h('div', { class: 'page-head' }, h('h1', {}, name)), h('p', { class: 'muted' }, 'This link opens the live view of this sandbox only, view-only.'), live.el);
  live.want(true);
  return {
    update() {},
    destroy() {
      live.destroy();
    },
  };
}
