// The live view: noVNC on the sandbox's display WebSocket. View-only unless
// this page holds control of the sandbox's input.
import RFB from '@novnc/novnc';
import { displayTokenFor, enc, forgetDisplayToken, postJSON, token } from './api.js';
import { h } from './dom.js';

const MAX_RETRY_DELAY = 30_000;

export class LiveView {
  constructor(sandbox) {
    this.sandbox = sandbox;
    this.rfb = null;
    this.wanted = false;
    this.controlToken = ''; // a display token carrying our take-over
    this.usedLinkToken = false;
    this.retryDelay = 1000;
    this.retryTimer = null;
    this.screen = h('div', { class: 'live-screen', id: 'live-screen' });
    this.message = h('span', { class: 'live-message' });
    this.reconnectButton = h('button', { type: 'button', class: 'small', hidden: true, onclick: () => this.reconnect() }, 'Reconnect');
    this.el = h('div', { class: 'live', id: 'live', dataset: { state: 'idle', viewOnly: 'true' } }, this.screen, h('div', { class: 'live-bar' }, this.message, this.reconnectButton));
    this.setState('idle', 'The live view starts when the sandbox runs.');
  }

  setState(state, message) {
    this.el.dataset.state = state;
    this.message.textContent = message;
    this.reconnectButton.hidden = state !== 'disconnected' && state !== 'error';
  }

  // want connects while the sandbox can show a screen, and disconnects
  // otherwise.
  want(on, why) {
    if (on === this.wanted) return;
    this.wanted = on;
    if (on) this.connect();
    else {
      this.close();
      this.setState('idle', why || 'The live view starts when the sandbox runs.');
    }
  }

  // takeControl switches to the token of a take-over: input goes through.
  useControl(displayToken) {
    this.controlToken = displayToken || '';
    this.reconnect();
  }

  get controlling() {
    return this.controlToken !== '' && this.rfb !== null && !this.rfb.viewOnly;
  }

  reconnect() {
    this.retryDelay = 1000;
    this.close();
    if (this.wanted) this.connect();
  }

  // displayURL is the display's WebSocket address with a display token:
  // the take-over's, the one a link brought, or a new one.
  async displayURL() {
    let t = this.controlToken;
    this.usedLinkToken = false;
    if (!t) {
      t = displayTokenFor(this.sandbox);
      this.usedLinkToken = t !== '';
    }
    if (!t) {
      try {
        t = (await postJSON(`/api/v1/sandboxes/${enc(this.sandbox)}/display/token`, {})).token;
      } catch (err) {
        // A server without a token lets its own pages in without one.
        if (token()) throw err;
        if (err.status === 401) throw new Error('the link\u2019s display token has expired: open a new link (hvkube console) or enter the server\u2019s token');
      }
    }
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    return `${proto}//${location.host}/api/v1/sandboxes/${enc(this.sandbox)}/display${t ? '?token=' + enc(t) : ''}`;
  }

  async connect() {
    clearTimeout(this.retryTimer);
    this.setState('connecting', 'Connecting…');
    let url;
    try {
      url = await this.displayURL();
    } catch (err) {
      this.setState('error', `No display token: ${err.message}`);
      this.retryLater();
      return;
    }
    if (!this.wanted) return;
    const viewOnly = this.controlToken === '';
    let rfb;
    try {
      rfb = new RFB(this.screen, url, { shared: true });
    } catch (err) {
      this.setState('error', `Cannot open the live view: ${err.message}`);
      return;
    }
    this.rfb = rfb;
    rfb.viewOnly = viewOnly;
    rfb.scaleViewport = true;
    rfb.resizeSession = false;
    rfb.background = '#0e1116';
    this.el.dataset.viewOnly = String(viewOnly);
    let connected = false;
    const usedLinkToken = this.usedLinkToken;
    rfb.addEventListener('connect', () => {
      connected = true;
      this.retryDelay = 1000;
      this.setState('connected', viewOnly ? 'Live · view only' : 'Live · you control the keyboard and mouse');
      if (!viewOnly) rfb.focus();
    });
    rfb.addEventListener('disconnect', (e) => {
      if (this.rfb !== rfb) return; // closed on purpose
      this.rfb = null;
      // A link's token that did not get in (expired): mint one next time.
      if (!connected && usedLinkToken) forgetDisplayToken(this.sandbox);
      this.setState('disconnected', connected ? 'The connection to the display was lost' : 'Could not connect to the display');
      this.retryLater();
    });
    rfb.addEventListener('securityfailure', (e) => {
      this.setState('error', `Display refused: ${e.detail.reason || e.detail.status}`);
    });
    rfb.addEventListener('credentialsrequired', () => {
      this.setState('error', 'The display asks for a password, which the dashboard does not have');
    });
  }

  retryLater() {
    if (!this.wanted) return;
    clearTimeout(this.retryTimer);
    const delay = this.retryDelay;
    this.retryDelay = Math.min(this.retryDelay * 2, MAX_RETRY_DELAY);
    this.message.textContent += ` · retrying in ${Math.round(delay / 1000)}s`;
    this.retryTimer = setTimeout(() => this.wanted && this.connect(), delay);
  }

  close() {
    clearTimeout(this.retryTimer);
    const rfb = this.rfb;
    this.rfb = null;
    if (rfb) rfb.disconnect();
  }

  destroy() {
    this.wanted = false;
    this.close();
  }
}
