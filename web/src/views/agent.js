// An agent: status, its question to a person, result, step screenshots,
// recording, artifacts, log, conditions and events.
import { blobURL, enc, filePath, request } from '../api.js';
import { badge, duration, fill, h, sandboxHref, sync, when } from '../dom.js';
import { eventsFor, state } from '../store.js';
import { RequestForms } from './hitl.js';
import { conditionsTable, details, eventsBlock } from './common.js';

const VIDEO = /\.(webm|mp4|mkv|ogv|mov)$/i;
const IMAGE = /\.(png|jpe?g|gif|webp)$/i;
const MAX_LOG = 256 * 1024; // the log's tail shown
const ACTIVE = ['Pending', 'Scheduled', 'Running'];

export function agentView(main, name) {
  const forms = new RequestForms();
  const urls = new Map(); // file path -> Promise<blob URL>
  let logTimer = null;
  let shotsKey = null;
  let filesKey = null;

  const phase = h('span');
  const missing = h('p', { class: 'card error', hidden: true }, `Agent ${name} does not exist (any more).`);
  const questionBox = h('div', { class: 'hitl-list' });
  const answered = h('div');
  const info = h('div');
  const result = h('div');
  const shots = h('div', { class: 'gallery', id: 'screenshots' });
  const recording = h('div', { id: 'recording' });
  const artifacts = h('div', { id: 'artifacts' });
  const log = h('pre', { class: 'log', id: 'log' }, '');
  const logStatus = h('span', { class: 'muted' });
  const conditions = h('div');
  const events = h('div');

  main.append(
    h('div', { class: 'crumbs' }, h('a', { href: '#/' }, 'Overview'), ' / agents'),
    h('div', { class: 'page-head' }, h('h1', {}, name, ' '), phase),
    missing,
    questionBox,
    answered,
    h(
      'div',
      { class: 'split' },
      h(
        'div',
        { class: 'main-col' },
        h('section', {}, h('h2', {}, 'Result'), result),
        h('section', {}, h('h2', {}, 'Screenshots'), shots),
        h('section', {}, h('h2', {}, 'Recording'), recording),
        h('section', {}, h('h2', {}, 'Artifacts'), artifacts),
        h('section', {}, h('div', { class: 'row' }, h('h2', {}, 'Log'), logStatus, h('button', { type: 'button', class: 'small', onclick: () => loadLog() }, 'Refresh')), log),
      ),
      h('div', { class: 'side-col' }, h('section', {}, h('h2', {}, 'Status'), info), h('section', {}, h('h2', {}, 'Conditions'), conditions), h('section', {}, h('h2', {}, 'Events'), events)),
    ),
  );

  function fileURL(rel) {
    if (!urls.has(rel)) urls.set(rel, blobURL(filePath(name, rel)));
    return urls.get(rel);
  }

  function image(rel, caption) {
    const img = h('img', { alt: rel, loading: 'lazy' });
    const fig = h('figure', {}, h('a', { href: '#', title: 'open full size' }, img), h('figcaption', {}, caption || rel));
    fileURL(rel).then(
      (u) => {
        img.src = u;
        fig.querySelector('a').addEventListener('click', (ev) => {
          ev.preventDefault();
          window.open(u, '_blank', 'noopener');
        });
      },
      (err) => fig.replaceChildren(h('p', { class: 'error small' }, `${rel}: ${err.message}`)),
    );
    return fig;
  }

  async function download(rel) {
    try {
      const u = await fileURL(rel);
      const a = h('a', { href: u, download: rel.split('/').pop() });
      document.body.append(a);
      a.click();
      a.remove();
    } catch (err) {
      alertIn(artifacts, `${rel}: ${err.message}`);
    }
  }

  async function loadLog() {
    try {
      const resp = await request(`/api/v1/agents/${enc(name)}/logs`);
      let text = await resp.text();
      if (text.length > MAX_LOG) text = '…\n' + text.slice(-MAX_LOG);
      const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 8;
      log.textContent = text || '(empty)';
      if (atEnd) log.scrollTop = log.scrollHeight;
      logStatus.textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      log.textContent = err.status === 404 ? 'No log yet.' : `Cannot read the log: ${err.message}`;
    }
  }

  function update() {
    const a = state.agents.get(name);
    const loaded = state.loaded.has('agents');
    missing.hidden = !loaded || !!a;
    const st = a?.status || {};
    fill(phase, a ? badge(st.phase || 'Pending') : null);

    const hr = st.humanRequest;
    const pending = hr && !hr.answeredAt ? [{ agent: name, sandbox: st.sandbox || '', request: hr }] : [];
    forms.keep(pending);
    sync(questionBox, pending.map((r) => forms.card(r)));
    fill(
      answered,
      hr && hr.answeredAt
        ? h('div', { class: 'card' }, h('div', { class: 'muted small' }, 'Asked ', when(hr.askedAt), ', answered by ', hr.answeredBy || 'someone', ' ', when(hr.answeredAt)), h('blockquote', { class: 'question' }, hr.question), h('p', { class: 'answer' }, hr.answer))
        : null,
    );

    fill(
      info,
      a
        ? details([
            ['Type', a.spec?.type || ''],
            ['Sandbox', st.sandbox ? h('a', { href: sandboxHref(st.sandbox) }, st.sandbox) : '—'],
            ['Task', a.spec?.task?.workflow || (a.spec?.task?.command || []).join(' ')],
            ['Attempts', `${st.attempts ?? 0}${st.failures ? ` (${st.failures} failed)` : ''}`],
            ['Node', st.node || ''],
            ['Created', when(a.metadata.creationTimestamp)],
            ['Started', st.startedAt ? when(st.startedAt) : ''],
            ['Finished', st.completedAt ? when(st.completedAt) : ''],
            ['Reason', st.reason ? `${st.reason}${st.message ? ': ' + st.message : ''}` : st.message || ''],
          ])
        : null,
    );

    const res = st.result;
    fill(result, resultBlock(res));

    const shotList = screenshotsOf(res);
    const key = shotList.map((s) => s.rel).join('\n');
    if (key !== shotsKey) {
      shotsKey = key;
      fill(shots, shotList.length ? shotList.map((s) => image(s.rel, s.caption)) : h('p', { class: 'empty' }, 'No screenshots.'));
    }

    const arts = res?.artifacts || [];
    const fkey = arts.join('\n');
    if (fkey !== filesKey) {
      filesKey = fkey;
      const videos = arts.filter((f) => VIDEO.test(f));
      fill(recording, videos.length ? videos.map((v) => videoBlock(v)) : h('p', { class: 'empty' }, a?.spec?.output?.screenRecording ? 'The recording appears here when the agent finishes.' : 'Not recorded (output.screenRecording).'));
      fill(
        artifacts,
        arts.length
          ? h(
              'ul',
              { class: 'files' },
              arts.map((f) => h('li', {}, h('span', { class: 'mono' }, f), h('button', { type: 'button', class: 'small', onclick: () => download(f) }, 'Download'))),
            )
          : h('p', { class: 'empty' }, 'No artifacts.'),
      );
    }

    fill(conditions, conditionsTable(st.conditions));
    fill(events, eventsBlock(eventsFor('Agent', name)));

    // The log follows a running agent.
    const active = ACTIVE.includes(st.phase);
    if (active && !logTimer) logTimer = setInterval(loadLog, 3000);
    if (!active && logTimer) {
      clearInterval(logTimer);
      logTimer = null;
      loadLog(); // the final log
    }
  }

  function videoBlock(rel) {
    const wrap = h('div', { class: 'video' });
    const load = h(
      'button',
      {
        type: 'button',
        onclick: async () => {
          load.disabled = true;
          try {
            const u = await fileURL(rel);
            fill(wrap, h('video', { src: u, controls: true, preload: 'metadata' }), h('div', {}, h('a', { href: u, download: rel.split('/').pop() }, 'Download ' + rel)));
          } catch (err) {
            alertIn(wrap, `${rel}: ${err.message}`);
            load.disabled = false;
          }
        },
      },
      `Play ${rel}`,
    );
    wrap.append(load);
    return wrap;
  }

  loadLog();
  return {
    update,
    destroy() {
      clearInterval(logTimer);
      for (const p of urls.values()) p.then((u) => URL.revokeObjectURL(u), () => {});
    },
  };
}

function alertIn(el, text) {
  el.append(h('p', { class: 'error small' }, text));
}

// screenshotsOf lists a result's screenshots: each step's, then the rest.
function screenshotsOf(res) {
  if (!res) return [];
  const out = [];
  const seen = new Set();
  (res.steps || []).forEach((s, i) => {
    if (s.screenshot && !seen.has(s.screenshot)) {
      seen.add(s.screenshot);
      out.push({ rel: s.screenshot, caption: `step ${i + 1}: ${s.action}${s.ok ? '' : ' (failed)'}` });
    }
  });
  for (const rel of res.screenshots || []) {
    if (!seen.has(rel) && IMAGE.test(rel)) {
      seen.add(rel);
      out.push({ rel, caption: rel });
    }
  }
  return out;
}

function resultBlock(res) {
  if (!res) return h('p', { class: 'empty' }, 'No result yet.');
  let output = null;
  if (res.output !== undefined && res.output !== null) {
    output = h('pre', { class: 'json' }, JSON.stringify(res.output, null, 2));
  }
  return [
    h('p', {}, h('span', { class: `pill ${res.success ? 'ok' : 'bad'}` }, res.success ? 'succeeded' : 'failed'), res.durationSeconds ? ` in ${duration(res.durationSeconds)}` : '', res.exitCode !== undefined && res.exitCode !== null ? ` · exit code ${res.exitCode}` : ''),
    output,
    res.steps?.length
      ? h(
          'table',
          { class: 'list steps' },
          h('thead', {}, h('tr', {}, h('th', {}, '#'), h('th', {}, 'Action'), h('th', {}, ''), h('th', {}, 'Output'), h('th', {}, 'Time'))),
          h(
            'tbody',
            {},
            res.steps.map((s, i) =>
              h(
                'tr',
                { class: s.ok ? '' : 'failed' },
                h('td', {}, String(i + 1)),
                h('td', {}, s.action),
                h('td', {}, h('span', { class: `pill ${s.ok ? 'ok' : 'bad'}` }, s.ok ? 'ok' : 'failed')),
                h('td', { class: 'mono small' }, s.error || s.output || ''),
                h('td', {}, duration(s.durationSeconds)),
              ),
            ),
          ),
        )
      : null,
  ];
}
