// Drives the dashboard in headless Chromium (Debian's, never a downloaded
// one) with playwright-core. The Go tests start a real server and run
//
//   node test/dashboard.mjs SCENARIO < config.json
//
// with config {url, token, displayToken, chromium, pool, sandbox, agent,
// question, answer, control, longTimeoutMs, artifacts}.
// The last line of output is JSON: {"ok": true, ...} or {"ok": false,
// "error": "..."}; the exit status is 0 only when ok.
import { chromium } from 'playwright-core';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const scenario = process.argv[2];
const cfg = JSON.parse(readFileSync(0, 'utf8'));
// Generous: the machines that run these are often busy.
const T = { short: 30_000, long: Number(cfg.longTimeoutMs || 180_000) };

const problems = []; // page errors and CSP violations
const notes = {};

function fail(msg) {
  throw new Error(msg);
}

async function expectText(locator, re, timeout = T.short) {
  await locator.waitFor({ state: 'attached', timeout });
  const deadline = Date.now() + timeout;
  let text = '';
  while (Date.now() < deadline) {
    text = (await locator.textContent()) || '';
    if (re.test(text)) return text;
    await new Promise((r) => setTimeout(r, 100));
  }
  fail(`expected ${re} in ${locator}, got ${JSON.stringify(text)}`);
}

// The pages' API calls as the test's own (Node) client.
async function api(method, p, body) {
  const headers = { 'Content-Type': 'application/json' };
  if (cfg.token) headers.Authorization = 'Bearer ' + cfg.token;
  const resp = await fetch(cfg.url + p, { method, headers, body: body ? JSON.stringify(body) : undefined });
  if (!resp.ok) fail(`${method} ${p}: ${resp.status} ${await resp.text()}`);
  return resp;
}

// canvasStats samples the live view's canvas: how many distinct colours,
// and whether any pixel is not black.
async function canvasStats(page) {
  return page.evaluate(() => {
    const c = document.querySelector('#live-screen canvas');
    if (!c || !c.width || !c.height) return { colours: 0, width: 0, height: 0 };
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    const seen = new Set();
    let lit = 0;
    const step = Math.max(1, Math.floor((c.width * c.height) / 4000));
    for (let i = 0; i < c.width * c.height; i += step) {
      const o = i * 4;
      const v = (d[o] << 16) | (d[o + 1] << 8) | d[o + 2];
      seen.add(v);
      if (v !== 0) lit++;
    }
    return { colours: seen.size, lit, width: c.width, height: c.height };
  });
}

async function waitNonBlank(page, timeout) {
  const deadline = Date.now() + timeout;
  let s;
  while (Date.now() < deadline) {
    s = await canvasStats(page);
    if (s.colours >= 2 && s.lit > 0) return s;
    await page.waitForTimeout(250);
  }
  fail(`the live view stayed blank: ${JSON.stringify(s)}`);
}

// signIn handles the token form when the server has a token.
async function signIn(page) {
  if (!cfg.token) return;
  await page.locator('#token-form').waitFor({ timeout: T.short });
  await page.fill('#token-input', cfg.token);
  await page.click('#token-form button[type=submit]');
}

const scenarios = {
  // The overview lists the pool (with its counts) and the sandbox, and
  // follows changes live. With a token: refused first, then accepted.
  async overview(page) {
    await page.goto(cfg.url + '/');
    if (cfg.token) {
      await page.locator('#token-form').waitFor({ timeout: T.short });
      if (await page.locator('[data-pool]').count()) fail('data shown before the token was entered');
      await page.fill('#token-input', 'wrong-' + cfg.token);
      await page.click('#token-form button[type=submit]');
      await expectText(page.locator('#token-error'), /refused/);
      await signIn(page);
    }
    const pool = page.locator(`[data-pool="${cfg.pool}"]`);
    await pool.waitFor({ timeout: T.short });
    notes.pool = (await pool.innerText()).replace(/\s+/g, ' ').trim();
    if (cfg.poolText && !notes.pool.includes(cfg.poolText)) fail(`pool card ${JSON.stringify(notes.pool)} lacks ${JSON.stringify(cfg.poolText)}`);
    await page.locator(`tr[data-sandbox="${cfg.sandbox}"]`).waitFor({ timeout: T.short });
    await expectText(page.locator('#conn'), /^live$/);

    // Live: a sandbox created now shows up, and goes when deleted.
    const name = 'live-' + Date.now();
    await api('POST', '/api/v1/sandboxes', { apiVersion: 'hvkube/v1', kind: 'Sandbox', metadata: { name } });
    await page.locator(`tr[data-sandbox="${name}"]`).waitFor({ timeout: T.short });
    await api('DELETE', `/api/v1/sandboxes/${name}`);
    await page.locator(`tr[data-sandbox="${name}"]`).waitFor({ state: 'detached', timeout: T.short });

    // The sandbox's page opens from its row.
    await page.click(`tr[data-sandbox="${cfg.sandbox}"] a`);
    await expectText(page.locator('.page-head h1'), new RegExp(cfg.sandbox));
    notes.token_in_storage = await page.evaluate(() => sessionStorage.getItem('hvkube.token') !== null);
  },

  // Without the token the page shows only the form and reads nothing.
  async notoken(page) {
    await page.goto(cfg.url + '/');
    await page.locator('#token-form').waitFor({ timeout: T.short });
    await page.waitForTimeout(500);
    if (await page.locator('[data-pool], [data-sandbox]').count()) fail('objects shown without a token');
    notes.api_status = await page.evaluate(async () => (await fetch('/api/v1/sandboxes')).status);
    if (notes.api_status !== 401) fail(`the API answered ${notes.api_status} without a token`);
  },

  // A link with the token in its fragment opens the page, and the token
  // leaves the address bar.
  async fragment(page) {
    await page.goto(`${cfg.url}/#/sandboxes/${encodeURIComponent(cfg.sandbox)}?token=${encodeURIComponent(cfg.token)}`);
    await expectText(page.locator('.page-head h1'), new RegExp(cfg.sandbox));
    notes.url = page.url();
    if (notes.url.includes('token')) fail(`the token stayed in the address: ${notes.url}`);
    await page.reload();
    await expectText(page.locator('.page-head h1'), new RegExp(cfg.sandbox));
  },

  // A pending human request is listed; the page answers it.
  async hitl(page) {
    await page.goto(cfg.url + '/#/hitl');
    await signIn(page);
    const card = page.locator(`form.hitl-card[data-agent="${cfg.agent}"]`);
    await card.waitFor({ timeout: T.short });
    await expectText(card.locator('.question'), new RegExp(cfg.question || '.'));
    await card.locator('input.name').fill('Test Person');
    await card.locator('input.name').dispatchEvent('change');
    await card.locator('textarea').fill(cfg.answer);
    await card.locator('button[type=submit]').click();
    // "Sending…" until the server answers; once the answer is in, the
    // card leaves the queue (possibly before its status is read).
    const deadline = Date.now() + T.short;
    let status = '';
    for (;;) {
      if ((await card.count()) === 0) {
        status = 'Answered';
        break;
      }
      status = (await card.locator('.form-status').textContent({ timeout: 500 }).catch(() => '')) || '';
      if (status && !status.startsWith('Sending')) break;
      if (Date.now() > deadline) {
        notes.card = await card.evaluate((f) => ({ valid: f.checkValidity(), answer: f.querySelector('textarea').value, html: f.outerHTML.slice(0, 2000) }), null, { timeout: 2000 }).catch((e) => e.message);
        fail(`no answer from the server: ${JSON.stringify(status)}`);
      }
      await page.waitForTimeout(100);
    }
    notes.status = status;
    if (status !== 'Answered') fail(`answering: ${status}`);
    await card.waitFor({ state: 'detached', timeout: T.short });
    await expectText(page.locator('#flash'), /Answer sent/);
  },

  // A link with a display token (hvkube console) shows that sandbox's
  // live view without the server's token, and asks for it for the rest.
  async link(page) {
    await page.goto(`${cfg.url}/#/sandboxes/${encodeURIComponent(cfg.sandbox)}?token=${encodeURIComponent(cfg.displayToken)}`);
    await page.locator('#token-form').waitFor({ timeout: T.short });
    await page.locator('#live[data-state="connected"]').waitFor({ timeout: T.long });
    notes.canvas = await waitNonBlank(page, T.long);
    notes.url = page.url();
    if (notes.url.includes('token')) fail(`the token stayed in the address: ${notes.url}`);
    if (await page.evaluate(() => sessionStorage.getItem('hvkube.token'))) fail('the display token was kept as the server token');
  },

  // The sandbox page's buttons: a screenshot, pause and resume, reset.
  async sandbox(page) {
    await page.goto(`${cfg.url}/#/sandboxes/${encodeURIComponent(cfg.sandbox)}`);
    await signIn(page);
    await expectText(page.locator('.page-head .badge'), /Running/, T.long);

    await page.click('button[data-act="screenshot"]');
    await page.waitForFunction(() => document.querySelector('#screenshot img')?.naturalWidth > 0, null, { timeout: T.long });
    notes.screenshot = await page.evaluate(() => [document.querySelector('#screenshot img').naturalWidth, document.querySelector('#screenshot img').naturalHeight]);

    for (const [act, phase] of [['pause', 'Paused'], ['resume', 'Running'], ['reset', 'Running']]) {
      await page.locator(`button[data-act="${act}"]:enabled`).waitFor({ timeout: T.long });
      await page.click(`button[data-act="${act}"]`);
      const label = act[0].toUpperCase() + act.slice(1);
      notes[act] = await expectText(page.locator('#action-status'), new RegExp(`${label} done|${act} failed`), T.long);
      if (!notes[act].includes('done')) fail(notes[act]);
      await expectText(page.locator('.page-head .badge'), new RegExp(phase), T.long);
    }
  },

  // The terminal tab opens a shell in the guest: typed input runs, its
  // output shows, exit ends it.
  async terminal(page) {
    await page.goto(`${cfg.url}/#/sandboxes/${encodeURIComponent(cfg.sandbox)}`);
    await signIn(page);
    await expectText(page.locator('.page-head .badge'), /Running/, T.long);
    await page.click('button[data-act="terminal"]');
    await expectText(page.locator('#terminal-status'), /Connected/, T.long);
    const rows = page.locator('#terminal .xterm-rows');
    await expectText(rows, /\$/, T.long); // the shell's prompt
    await page.locator('#terminal').click();
    await page.keyboard.type('echo hv-$((6*7)) $(id -un)\n');
    notes.output = await expectText(rows, /hv-42\s\w+/, T.long);
    await page.keyboard.type('exit 4\n');
    notes.status = await expectText(page.locator('#terminal-status'), /Exited with 4/, T.long);
  },

  // The live view shows the desktop, view-only; taking control switches
  // input on, handing it back switches it off.
  async live(page) {
    await page.goto(`${cfg.url}/#/sandboxes/${encodeURIComponent(cfg.sandbox)}`);
    await signIn(page);
    await page.locator('#live[data-state="connected"]').waitFor({ timeout: T.long });
    notes.canvas = await waitNonBlank(page, T.long);
    if ((await page.locator('#live').getAttribute('data-view-only')) !== 'true') fail('the live view is not view-only by default');
    if (cfg.control) {
      await page.click('button[data-act="take"]');
      await page.locator('#live[data-state="connected"][data-view-only="false"]').waitFor({ timeout: T.long });
      await page.locator('.control-info .card').waitFor({ timeout: T.short });
      notes.control = (await page.locator('.control-info').innerText()).trim();
      await waitNonBlank(page, T.long);
      await page.click('button[data-act="release"]');
      await page.locator('#live[data-state="connected"][data-view-only="true"]').waitFor({ timeout: T.long });
      await page.locator('.control-info .card').waitFor({ state: 'detached', timeout: T.short });
    }
  },
};

const run = scenarios[scenario];
if (!run) {
  console.log(JSON.stringify({ ok: false, error: `unknown scenario ${scenario}: ${Object.keys(scenarios).join(', ')}` }));
  process.exit(2);
}

const browser = await chromium.launch({
  executablePath: cfg.chromium,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
let ok = false;
let error = '';
const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
page.on('pageerror', (e) => problems.push('page error: ' + e.message));
page.on('console', (m) => {
  const t = m.text();
  if (m.type() === 'error' && /Content.Security.Policy|Refused to/i.test(t)) problems.push('CSP: ' + t);
});
try {
  await run(page);
  if (problems.length) fail(problems.join('\n'));
  ok = true;
} catch (err) {
  error = err.message;
  if (problems.length) error += '\n' + problems.join('\n');
  if (cfg.artifacts) {
    const shot = path.join(cfg.artifacts, `${scenario}.png`);
    await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
    notes.screenshot_file = shot;
    notes.url = page.url();
  }
} finally {
  await browser.close();
}
console.log(JSON.stringify({ ok, error, notes }));
process.exit(ok ? 0 : 1);
