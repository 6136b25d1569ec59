package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/terminal"
)

// A terminal is a program on a pseudo-terminal in a Linux guest, as the
// desktop's user, over a WebSocket:
//
//	GET /api/v1/sandboxes/{name}/terminal?command=bash&command=-l&rows=24&cols=80
//
// Each binary message is a frame: a type byte and its payload. From the
// client: 0 input (bytes typed; Ctrl-C is byte 3, which the terminal turns
// into SIGINT), 1 the window's size (rows and columns, 2 bytes each,
// big-endian). From the server: 0 output, 3 the program's exit status (4
// bytes, signed, big-endian; 128+N after signal N), after which the server
// closes the WebSocket. No command runs the user's login shell. Closing the
// WebSocket ends the program (SIGHUP).
//
// An agent's token reaches its attempt's sandbox's terminal while the
// attempt holds the sandbox and no person does; a person's take-over
// ends the session. A browser, which cannot set the header on a
// WebSocket, opens it with ?token= and a terminal token (POST
// …/terminal/token with the server's token: one sandbox, one minute).

// maxTerminals bounds the open terminals of one sandbox.
const maxTerminals = 8

// terminalIdle ends a terminal nobody typed into, and whose program wrote
// nothing, for this long.
const terminalIdle = time.Hour

type terminals struct {
	s    *Server
	open connLimit
}

func (s *Server) terminalRoutes() {
	t := &terminals{s: s, open: connLimit{max: func() int { return maxTerminals }}}
	serve := s.withSandboxes(t.serve)
	s.mux.HandleFunc("GET /api/v1/sandboxes/{name}/terminal", func(w http.ResponseWriter, r *http.Request) {
		// A token in the query is checked before anything is looked up.
		if err := s.checkTicket(r); err != nil {
			s.fail(w, r, err)
			return
		}
		serve(w, r)
	})
	s.mux.HandleFunc("POST /api/v1/sandboxes/{name}/terminal/token", s.withSandboxes(s.terminalToken))
}

// TerminalToken is the answer of POST …/terminal/token.
type TerminalToken struct {
	Token   string    `json:"token"`
	Expires time.Time `json:"expires"`
}

// terminalToken mints what a browser opens the terminal's WebSocket with
// (?token=): for this sandbox only, for a minute. Only the server's token
// mints one (an agent's token is refused by its scope, and opens its
// terminal with its header).
func (s *Server) terminalToken(w http.ResponseWriter, r *http.Request) {
	if s.opts.ScopedKey == nil {
		writeError(w, http.StatusNotImplemented, errors.New("this server has no key to sign terminal tokens"))
		return
	}
	tok, exp := s.opts.ScopedKey.MintTerminal(r.PathValue("name"), time.Now())
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, TerminalToken{Token: tok, Expires: exp.UTC()})
}

// isTerminalTicket reports whether r opens a terminal with a terminal
// token in its query and no credential of its own: it authorizes itself
// (checkTicket).
func isTerminalTicket(r *http.Request) bool {
	if r.Method != http.MethodGet || r.Header.Get("Authorization") != "" || !r.URL.Query().Has("token") {
		return false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/v1/sandboxes/")
	name, ok2 := strings.CutSuffix(rest, "/terminal")
	return ok && ok2 && name != "" && !strings.Contains(name, "/")
}

// checkTicket checks the terminal token of a request that isTerminalTicket
// let through: signed by this server, for this sandbox, not expired.
func (s *Server) checkTicket(r *http.Request) error {
	if !isTerminalTicket(r) {
		return nil // authenticated by its header
	}
	if s.opts.ScopedKey == nil {
		return &httpError{http.StatusUnauthorized, errors.New("this server has no key to check terminal tokens")}
	}
	name, err := s.opts.ScopedKey.VerifyTerminal(r.URL.Query().Get("token"), time.Now())
	switch {
	case err != nil:
		return &httpError{http.StatusUnauthorized, fmt.Errorf("terminal token: %v (mint one with POST /api/v1/sandboxes/NAME/terminal/token)", err)}
	case name != r.PathValue("name"):
		return &httpError{http.StatusForbidden, fmt.Errorf("this terminal token opens sandbox %s's terminal, not %s's", name, r.PathValue("name"))}
	}
	return nil
}

// guestTerminal joins the server's sandboxes and their ports into what
// terminal.Open needs.
type guestTerminal struct {
	Sandboxes
	PortDialer
}

func (t *terminals) serve(w http.ResponseWriter, r *http.Request) {
	s := t.s
	name := r.PathValue("name")
	if !isWebSocket(r) {
		writeError(w, http.StatusBadRequest, errors.New("a terminal is a WebSocket: open it with Upgrade: websocket (hvkube exec -it)"))
		return
	}
	q := r.URL.Query()
	req := terminal.Request{Argv: q["command"], Term: q.Get("term")}
	for _, f := range []struct {
		key string
		v   *int
	}{{"rows", &req.Rows}, {"cols", &req.Cols}} {
		if v := q.Get(f.key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				s.fail(w, r, api.Invalid(f.key, "%q is not a positive number", v))
				return
			}
			*f.v = n
		}
	}
	if err := req.Check(); err != nil {
		s.fail(w, r, err)
		return
	}
	info, err := s.desktopOf(r.Context(), name)
	if err == nil {
		err = linuxOnly(info, "a terminal")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	req.User = info.User
	pd, ok := s.opts.Sandboxes.(PortDialer)
	if !ok {
		writeError(w, http.StatusNotImplemented, errors.New("a terminal needs a backend that reaches guest ports, and this server's has none"))
		return
	}
	release, ok := t.open.acquire(name)
	if !ok {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("sandbox %s has %d terminals open, the most it may: close one first", name, maxTerminals))
		return
	}
	defer release()
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	if sc, scoped := scopeOf(r.Context()); scoped {
		go s.whileScopeHolds(ctx, cancel, sc, needSandboxAct, "terminal")
	}
	// The guest's side first: a failure is still an HTTP answer.
	octx, ocancel := context.WithTimeout(ctx, time.Minute)
	tc, err := terminal.Open(octx, guestTerminal{s.opts.Sandboxes, pd}, name, req)
	ocancel()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer tc.Close()
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ws.SetReadLimit(terminal.MaxPayload + 1)
	s.log.Info("terminal opened", "sandbox", name, "user", req.User, "command", req.Argv)

	idle := time.AfterFunc(terminalIdle, func() { cancel(errors.New("idle")) })
	defer idle.Stop()
	go func() { // the client's frames to the guest
		defer cancel(nil)
		for {
			typ, msg, err := ws.Read(ctx)
			if err != nil {
				return
			}
			if typ != websocket.MessageBinary || len(msg) < 1 {
				ws.Close(websocket.StatusUnsupportedData, "frames are binary: a type byte and its payload")
				return
			}
			switch msg[0] {
			case terminal.Input:
			case terminal.Resize:
				if len(msg) != 5 {
					ws.Close(websocket.StatusUnsupportedData, "a resize frame carries rows and columns, 2 bytes each")
					return
				}
			default:
				ws.Close(websocket.StatusUnsupportedData, fmt.Sprintf("unknown frame type %d", msg[0]))
				return
			}
			idle.Reset(terminalIdle)
			if err := tc.Send(msg[0], msg[1:]); err != nil {
				return
			}
		}
	}()
	go func() { // ends the guest's side when the session ends
		<-ctx.Done()
		tc.Close()
	}()
	for {
		kind, data, err := tc.Next()
		if err != nil {
			why := "the terminal ended"
			if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
				why = c.Error()
			}
			if len(why) > 120 {
				why = why[:120]
			}
			ws.Close(websocket.StatusGoingAway, why)
			return
		}
		idle.Reset(terminalIdle)
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		err = ws.Write(wctx, websocket.MessageBinary, append([]byte{kind}, data...))
		wcancel()
		if err != nil {
			return
		}
		if kind == terminal.Exit {
			ws.Close(websocket.StatusNormalClosure, "exit "+strconv.Itoa(terminal.ExitCode(data)))
			return
		}
	}
}
