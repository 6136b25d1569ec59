// The terminal: a shell in the sandbox's guest, on a pseudo-terminal as
// the desktop's user, over the API's terminal WebSocket (xterm.js). A
// browser cannot set the token header on a WebSocket: the page mints a
// terminal token (one sandbox, one minute) and opens it with that.
import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import { enc, postJSON } from './api.js';
import { h } from './dom.js';

// xterm.js writes its styles into <style> elements, which the page's
// policy refuses unless they carry the nonce the server gave this page.
const styleNonce = document.querySelector('meta[name="hvkube-style-nonce"]')?.content;
if (styleNonce) {
  const create = Document.prototype.createElement;
  Document.prototype.createElement = function (tag, opts) {
    const el = create.call(this, tag, opts);
    if (String(tag).toLowerCase() === 'style') el.nonce = styleNonce;
    return el;
  };
}

const INPUT = 0;
const RESIZE = 1;
const OUTPUT = 0;
const EXIT = 3;

export class TerminalPane {
  constructor(sandbox, onClose) {
    this.sandbox = sandbox;
    this.onClose = onClose;
    this.status = h('span', { class: 'muted', id: 'terminal-status' }, 'Connecting…');
    this.screen = h('div', { class: 'terminal-screen', id: 'terminal' });
    this.el = h(
      'section',
      { class: 'terminal-pane' },
      h('div', { class: 'row' }, h('h2', {}, 'Terminal'), this.status, h('button', { type: 'button', class: 'small', onclick: () => this.close() }, 'Close')),
      this.screen,
    );
    this.enc = new TextEncoder();
  }

  // open starts the session; the pane must be in the page (xterm measures it).
  async open() {
    this.term = new Terminal({ fontSize: 13, cursorBlink: true, scrollback: 2000 });
    this.fit = new FitAddon();
    this.term.loadAddon(this.fit);
    this.term.open(this.screen);
    this.fit.fit();
    const path = `/api/v1/sandboxes/${enc(this.sandbox)}/terminal`;
    let q = `rows=${this.term.rows}&cols=${this.term.cols}&term=xterm-256color`;
    try {
      q += '&token=' + enc((await postJSON(`${path}/token`, {})).token);
    } catch (err) {
      // A server without a key lets its own pages in without one.
      if (err.status !== 501) {
        this.setStatus(`No terminal token: ${err.message}`);
        return;
      }
    }
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(`${proto}//${location.host}${path}?${q}`);
    ws.binaryType = 'arraybuffer';
    this.ws = ws;
    ws.onopen = () => {
      this.setStatus('Connected');
      this.term.focus();
    };
    ws.onmessage = (ev) => {
      const b = new Uint8Array(ev.data);
      if (b[0] === OUTPUT) this.term.write(b.subarray(1));
      else if (b[0] === EXIT) {
        const code = new DataView(ev.data).getInt32(1);
        this.exited = true;
        this.term.write(`\r\n[exited with ${code}]\r\n`);
        this.setStatus(`Exited with ${code}`);
      }
    };
    ws.onclose = (ev) => {
      if (!this.exited) this.setStatus(`Closed${ev.reason ? ': ' + ev.reason : ''}`);
    };
    this.term.onData((d) => this.send(INPUT, this.enc.encode(d)));
    this.term.onResize(({ rows, cols }) => {
      const p = new Uint8Array(4);
      new DataView(p.buffer).setUint16(0, rows);
      new DataView(p.buffer).setUint16(2, cols);
      this.send(RESIZE, p);
    });
    this.onWindow = () => this.fit.fit();
    window.addEventListener('resize', this.onWindow);
  }

  send(type, payload) {
    if (this.ws?.readyState !== WebSocket.OPEN) return;
    const m = new Uint8Array(1 + payload.length);
    m[0] = type;
    m.set(payload, 1);
    this.ws.send(m);
  }

  setStatus(text) {
    this.status.textContent = text;
  }

  close() {
    this.destroy();
    this.onClose?.();
  }

  destroy() {
    this.ws?.close();
    if (this.onWindow) window.removeEventListener('resize', this.onWindow);
    this.term?.dispose();
    this.el.remove();
  }
}
