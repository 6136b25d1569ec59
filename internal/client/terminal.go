package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/coder/websocket"

	"github.com/hvkube/hvkube/internal/terminal"
)

// Terminal is a terminal session in a sandbox's guest (server's
// terminal.go): frames over a WebSocket.
type Terminal struct {
	ws *websocket.Conn
}

// OpenTerminal runs argv (the user's login shell when empty) on a
// pseudo-terminal of rows by cols in sandbox name, as the desktop's user.
func (c *Client) OpenTerminal(ctx context.Context, name string, argv []string, rows, cols int, term string) (*Terminal, error) {
	q := url.Values{"command": argv}
	if rows > 0 {
		q.Set("rows", strconv.Itoa(rows))
	}
	if cols > 0 {
		q.Set("cols", strconv.Itoa(cols))
	}
	if term != "" {
		q.Set("term", term)
	}
	u := "ws" + strings.TrimPrefix(c.base, "http") + "/api/v1/sandboxes/" + url.PathEscape(name) + "/terminal?" + q.Encode()
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.http, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode >= 300 {
			e := &Error{Code: resp.StatusCode}
			if resp.Body != nil {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
				if json.Unmarshal(b, e) != nil || e.Message == "" {
					e.Message = fmt.Sprintf("terminal: %s: %s", resp.Status, strings.TrimSpace(string(b)))
				}
			}
			return nil, e
		}
		return nil, fmt.Errorf("terminal: %w", err)
	}
	ws.SetReadLimit(terminal.MaxPayload + 1)
	return &Terminal{ws: ws}, nil
}

// Write sends p as typed input.
func (t *Terminal) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += terminal.MaxPayload {
		chunk := p[off:min(len(p), off+terminal.MaxPayload)]
		if err := t.ws.Write(context.Background(), websocket.MessageBinary, append([]byte{terminal.Input}, chunk...)); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

// Resize sends the window's size.
func (t *Terminal) Resize(ctx context.Context, rows, cols int) error {
	return t.ws.Write(ctx, websocket.MessageBinary, append([]byte{terminal.Resize}, terminal.ResizePayload(rows, cols)...))
}

// ErrTerminalClosed is a session that ended without an exit status.
var ErrTerminalClosed = errors.New("the terminal closed without an exit status")

// Copy writes the program's output to w until it exits, and returns its
// exit status.
func (t *Terminal) Copy(ctx context.Context, w io.Writer) (int, error) {
	for {
		_, msg, err := t.ws.Read(ctx)
		if err != nil {
			if ce := websocket.CloseStatus(err); ce != -1 {
				var cerr websocket.CloseError
				if errors.As(err, &cerr) && cerr.Reason != "" {
					return -1, fmt.Errorf("%w: %s", ErrTerminalClosed, cerr.Reason)
				}
				return -1, ErrTerminalClosed
			}
			return -1, err
		}
		if len(msg) == 0 {
			continue
		}
		switch msg[0] {
		case terminal.Output:
			if _, err := w.Write(msg[1:]); err != nil {
				return -1, err
			}
		case terminal.Exit:
			return terminal.ExitCode(msg[1:]), nil
		}
	}
}

// Close ends the session (and the program).
func (t *Terminal) Close() error { return t.ws.CloseNow() }
