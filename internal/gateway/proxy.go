// Package gateway carries a sandbox's VNC (RFB) stream over a WebSocket to
// a browser viewer such as noVNC: the live display. Viewers watch; only the
// one holding control (a person who took over the sandbox) may send input,
// so the viewer's half of the stream is read message by message and its
// keys, pointer and clipboard are dropped unless control is held. It also
// keeps the display listeners of DisplayServices (listeners.go).
package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// Defaults of Options.
const (
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultIdleTimeout      = 15 * time.Minute
	// pingInterval is how often a quiet viewer is pinged; one that does
	// not answer within pingTimeout is gone.
	pingInterval = 30 * time.Second
	pingTimeout  = 15 * time.Second
	// copyBuffer is the size of the server-to-viewer copy: a 1280x800
	// raw frame is 4 MB, so large writes mean fewer WebSocket frames.
	copyBuffer = 256 << 10
	// writeTimeout bounds one write to a viewer that stopped reading.
	writeTimeout = 30 * time.Second
)

// Options shape one viewer's session.
type Options struct {
	// Sandbox names the sandbox, for logs.
	Sandbox string
	// Control reports whether the viewer may send input now; it is asked
	// for every input message (it may cache its answer briefly). nil:
	// read-only.
	Control func(ctx context.Context) bool
	// HandshakeTimeout bounds the RFB handshake (DefaultHandshakeTimeout
	// when 0); IdleTimeout ends a session with no traffic either way
	// (DefaultIdleTimeout when 0).
	HandshakeTimeout time.Duration
	IdleTimeout      time.Duration
	Logger           *slog.Logger
}

// Subprotocol is the WebSocket subprotocol of VNC viewers; it is agreed
// when the viewer offers it (noVNC before 1.5 does; later versions offer
// none, which is accepted too).
const Subprotocol = "binary"

// Serve dials the sandbox's display, upgrades the request to a WebSocket
// and carries the RFB stream until either side ends, ctx ends or the
// session idles out. A dial error is returned before the upgrade, so the
// caller can still answer with an HTTP status; after the upgrade Serve
// returns nil (what ended the session is logged).
func Serve(w http.ResponseWriter, r *http.Request, dial func(ctx context.Context) (io.ReadWriteCloser, error), o Options) error {
	dctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	vnc, err := dial(dctx)
	cancel()
	if err != nil {
		return err
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}})
	if err != nil {
		vnc.Close()
		return nil // Accept has answered
	}
	Proxy(r.Context(), ws, vnc, o)
	return nil
}

// Proxy carries RFB between the viewer's WebSocket ws and the VNC
// connection vnc until one ends, ctx ends, or the session idles; it closes
// both. Input messages pass only while o.Control says so.
func Proxy(ctx context.Context, ws *websocket.Conn, vnc io.ReadWriteCloser, o Options) {
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("sandbox", o.Sandbox)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	var once sync.Once
	var why atomic.Value // string: what ended the session
	end := func(reason string) {
		once.Do(func() {
			why.Store(reason)
			cancel()
			vnc.Close()
		})
	}
	var last atomic.Int64 // unix nanos of the last traffic either way
	touch := func() { last.Store(time.Now().UnixNano()) }
	touch()

	var wg sync.WaitGroup
	wg.Add(2)
	// Server to viewer: copied as it comes.
	go func() {
		defer wg.Done()
		buf := make([]byte, copyBuffer)
		for {
			n, err := vnc.Read(buf)
			if n > 0 {
				touch()
				conn.SetWriteDeadline(time.Now().Add(writeTimeout))
				if _, werr := conn.Write(buf[:n]); werr != nil {
					end("viewer write: " + werr.Error())
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					end("the VNC server closed the connection")
				} else {
					end("VNC read: " + err.Error())
				}
				return
			}
		}
	}()
	// Liveness: ping a quiet viewer, end an idle session.
	go func() {
		defer wg.Done()
		t := time.NewTicker(min(pingInterval, o.IdleTimeout))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			quiet := time.Since(time.Unix(0, last.Load()))
			if quiet >= o.IdleTimeout {
				end(fmt.Sprintf("idle for %s", o.IdleTimeout))
				return
			}
			if quiet >= pingInterval {
				pctx, pcancel := context.WithTimeout(ctx, pingTimeout)
				err := ws.Ping(pctx)
				pcancel()
				if err != nil && ctx.Err() == nil {
					end("the viewer did not answer a ping")
					return
				}
			}
		}
	}()

	dropped, passed := viewerToServer(ctx, conn, vnc, o, log, touch, end)
	end("")
	ws.Close(websocket.StatusNormalClosure, "")
	wg.Wait()
	reason, _ := why.Load().(string)
	log.Info("display session ended", "why", reason, "inputPassed", passed, "inputDropped", dropped)
}

// viewerToServer reads the viewer's handshake and messages and forwards
// them, dropping input unless control is held. It returns when the stream
// ends or breaks the rules.
func viewerToServer(ctx context.Context, conn net.Conn, vnc io.Writer, o Options, log *slog.Logger, touch func(), end func(string)) (dropped, passed int) {
	br := bufio.NewReaderSize(conn, 32<<10)
	conn.SetReadDeadline(time.Now().Add(o.HandshakeTimeout))
	version, err := Handshake(br, vnc)
	if err != nil {
		switch {
		case errors.Is(err, ErrHandshake):
			log.Warn("display: closing the connection: handshake refused", "err", err)
		case ctx.Err() == nil:
			log.Info("display: handshake did not complete", "within", o.HandshakeTimeout, "err", err)
		}
		end("handshake: " + err.Error())
		return
	}
	conn.SetReadDeadline(time.Time{})
	log.Info("display session started", "rfb", version, "control", o.Control != nil)
	mr := NewMessageReader(br)
	for {
		msg, err := mr.Next()
		if err != nil {
			switch {
			case errors.Is(err, ErrUnknownMessage), errors.Is(err, ErrTooLarge):
				log.Warn("display: closing the connection: the viewer sent a message the gateway does not pass", "err", err)
				end(err.Error())
			case errors.Is(err, io.EOF):
				end("the viewer closed the connection")
			default:
				end("viewer read: " + err.Error())
			}
			return
		}
		touch()
		if msg.Input && (o.Control == nil || !o.Control(ctx)) {
			if dropped == 0 {
				log.Info("display: dropping input from a viewer without control", "message", msg.Name)
			}
			dropped++
			continue
		}
		if msg.Input {
			passed++
		}
		if _, err := vnc.Write(msg.Raw); err != nil {
			end("VNC write: " + err.Error())
			return
		}
	}
}

// ControlCache wraps a control check so that it is asked at most once per
// ttl: a viewer moving the mouse sends dozens of events a second, and
// control released meanwhile must still stop them within ttl.
func ControlCache(ttl time.Duration, check func(ctx context.Context) bool) func(ctx context.Context) bool {
	var mu sync.Mutex
	var at time.Time
	var ok bool
	return func(ctx context.Context) bool {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); now.Sub(at) >= ttl {
			ok, at = check(ctx), now
		}
		return ok
	}
}
