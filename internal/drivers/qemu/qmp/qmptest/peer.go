// Package qmptest provides Peer, a test peer that plays QEMU's side of QMP
// on a unix socket, so a QMP client can be tested without a VM: command
// routing, concurrency, cancellation, events, error replies and a monitor
// that vanishes. It is a test double, not an emulator — tests that need real
// behaviour start a real QEMU.
//
// Like QEMU, a Peer sends a greeting, requires qmp_capabilities before any
// other command, echoes each command's id in its reply, reports malformed
// input with an id-less error, and serves one connection at a time. Unlike
// QEMU, it handles the commands of one connection concurrently (each in its
// own goroutine), which lets tests provoke out-of-order replies.
package qmptest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Greeting is the greeting a Peer sends, announcing QEMU 7.2.0.
const Greeting = `{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": "qmptest"}, "capabilities": ["oob"]}}`

// Request is a command the Peer received.
type Request struct {
	Command   string
	Arguments json.RawMessage
	ID        json.RawMessage
}

// Handler answers one command. It returns the value for the reply's
// "return" member (nil means {}), or an error: an *Error is sent as is, any
// other error as a GenericError with its text. ctx ends when the connection
// closes.
type Handler func(ctx context.Context, req Request) (any, error)

// Error is a QMP error reply.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *Error) Error() string { return e.Class + ": " + e.Desc }

// Peer is a QMP test peer listening on a unix socket in a test's temporary
// directory. It is closed by the test's cleanup.
type Peer struct {
	t    testing.TB
	path string
	ln   *net.UnixListener
	wg   sync.WaitGroup

	mu       sync.Mutex // guards the following fields
	handlers map[string]Handler
	conn     *peerConn // the connection being served, if any
	requests []Request
	state    string // run state for the built-in query-status, stop and cont
	closed   bool
}

type peerConn struct {
	c      net.Conn
	wmu    sync.Mutex // serialises writes
	ctx    context.Context
	cancel context.CancelFunc
}

// NewPeer starts a Peer. Built in are qmp_capabilities; query-status, stop
// and cont over a run state that starts as "prelaunch" (stop and cont emit
// STOP and RESUME before replying, as QEMU does); and quit, which emits
// SHUTDOWN, replies, then closes the connection and stops accepting. Handle
// adds or replaces commands; any other command gets CommandNotFound.
func NewPeer(t testing.TB) *Peer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qmp.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatalf("qmptest: listen: %v", err)
	}
	p := &Peer{t: t, path: path, ln: ln, handlers: make(map[string]Handler), state: "prelaunch"}
	p.handlers["qmp_capabilities"] = func(context.Context, Request) (any, error) { return nil, nil }
	p.handlers["query-status"] = func(context.Context, Request) (any, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return map[string]any{"status": p.state, "running": p.state == "running", "singlestep": false}, nil
	}
	p.handlers["stop"] = func(context.Context, Request) (any, error) {
		p.setState("paused", "STOP")
		return nil, nil
	}
	p.handlers["cont"] = func(context.Context, Request) (any, error) {
		p.setState("running", "RESUME")
		return nil, nil
	}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

func (p *Peer) setState(state, event string) {
	p.mu.Lock()
	changed := p.state != state
	p.state = state
	p.mu.Unlock()
	if changed {
		p.Emit(event, nil)
	}
}

// SocketPath returns the path of the Peer's socket.
func (p *Peer) SocketPath() string { return p.path }

// Handle makes h answer command, replacing any earlier handler.
func (p *Peer) Handle(command string, h Handler) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.handlers[command] = h
}

// Requests returns the commands received so far, in arrival order.
func (p *Peer) Requests() []Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Request(nil), p.requests...)
}

// Emit sends an event to the connected client, if there is one; data nil
// means an event without data.
func (p *Peer) Emit(name string, data any) {
	now := time.Now()
	ev := map[string]any{
		"event":     name,
		"timestamp": map[string]int64{"seconds": now.Unix(), "microseconds": int64(now.Nanosecond() / 1000)},
	}
	if data != nil {
		ev["data"] = data
	}
	b, err := json.Marshal(ev)
	if err != nil {
		p.t.Errorf("qmptest: encode event %s: %v", name, err)
		return
	}
	p.SendRaw(string(b) + "\r\n")
}

// SendRaw writes s as is to the connected client, if there is one.
func (p *Peer) SendRaw(s string) {
	p.mu.Lock()
	pc := p.conn
	p.mu.Unlock()
	if pc != nil {
		pc.write([]byte(s))
	}
}

// DropConnection closes the current connection, as when QEMU dies. The Peer
// keeps accepting new connections.
func (p *Peer) DropConnection() {
	p.mu.Lock()
	pc := p.conn
	p.mu.Unlock()
	if pc != nil {
		pc.cancel()
		pc.c.Close()
	}
}

// Close stops accepting, closes the current connection and waits for the
// Peer's goroutines (handlers must return once their ctx ends). It is
// idempotent.
func (p *Peer) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.DropConnection()
	p.wg.Wait()
}

func (p *Peer) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		pc := &peerConn{c: c, ctx: ctx, cancel: cancel}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			cancel()
			c.Close()
			return
		}
		p.conn = pc
		p.mu.Unlock()
		p.serve(pc) // one client at a time, as QEMU
		p.mu.Lock()
		if p.conn == pc {
			p.conn = nil
		}
		p.mu.Unlock()
	}
}

func (pc *peerConn) write(b []byte) {
	pc.wmu.Lock()
	defer pc.wmu.Unlock()
	pc.c.Write(b)
}

func (pc *peerConn) reply(id json.RawMessage, ret any, err error) {
	msg := map[string]any{}
	if id != nil {
		msg["id"] = id
	}
	if err != nil {
		var qe *Error
		if !errors.As(err, &qe) {
			qe = &Error{Class: "GenericError", Desc: err.Error()}
		}
		msg["error"] = qe
	} else {
		if ret == nil {
			ret = struct{}{}
		}
		msg["return"] = ret
	}
	b, merr := json.Marshal(msg)
	if merr != nil {
		b, _ = json.Marshal(map[string]any{"id": id, "error": Error{"GenericError", fmt.Sprintf("qmptest: encode reply: %v", merr)}})
	}
	pc.write(append(b, '\r', '\n'))
}

func (p *Peer) serve(pc *peerConn) {
	var handlers sync.WaitGroup
	defer func() {
		pc.cancel()
		pc.c.Close()
		handlers.Wait()
	}()
	pc.write([]byte(Greeting + "\r\n"))
	dec := json.NewDecoder(pc.c)
	negotiated := false
	for {
		var raw struct {
			Execute   string          `json:"execute"`
			Arguments json.RawMessage `json:"arguments"`
			ID        json.RawMessage `json:"id"`
		}
		if err := dec.Decode(&raw); err != nil {
			var syn *json.SyntaxError
			if errors.As(err, &syn) {
				pc.reply(nil, nil, &Error{"GenericError", "JSON parse error, " + err.Error()})
			}
			return
		}
		req := Request{Command: raw.Execute, Arguments: raw.Arguments, ID: raw.ID}
		p.mu.Lock()
		p.requests = append(p.requests, req)
		h := p.handlers[req.Command]
		p.mu.Unlock()

		switch {
		case !negotiated && req.Command != "qmp_capabilities":
			pc.reply(req.ID, nil, &Error{"CommandNotFound", "Expecting capabilities negotiation with 'qmp_capabilities'"})
			continue
		case req.Command == "qmp_capabilities" && h != nil:
			negotiated = true
		case req.Command == "quit" && h == nil:
			p.Emit("SHUTDOWN", map[string]any{"guest": false, "reason": "host-qmp-quit"})
			pc.reply(req.ID, nil, nil)
			p.mu.Lock()
			p.closed = true
			p.mu.Unlock()
			p.ln.Close()
			return
		case h == nil:
			pc.reply(req.ID, nil, &Error{"CommandNotFound", fmt.Sprintf("The command %s has not been found", req.Command)})
			continue
		}
		handlers.Add(1)
		go func() {
			defer handlers.Done()
			ret, err := h(pc.ctx, req)
			if pc.ctx.Err() != nil {
				return // connection gone
			}
			pc.reply(req.ID, ret, err)
		}()
	}
}
