// Package qgatest provides Peer, a test peer that plays the guest agent's
// side of the qemu-guest-agent protocol on a unix socket, so a guest agent
// client can be tested without a VM. It is a test double, not an emulator:
// files live in memory and processes are scripted.
//
// Like the agent behind QEMU's chardev socket, a Peer serves one connection
// at a time and answers requests strictly in order, with no ids; it prefixes
// its reply to guest-sync-delimited with a 0xFF byte; a 0xFF byte it receives
// discards any partial request and draws an error reply; and guest-shutdown
// gets no reply. Tests can delay replies per command (to provoke client
// timeouts and late replies) and inject stale bytes.
package qgatest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Process is the scripted outcome of a guest-exec.
type Process struct {
	ExitCode int
	Signal   int
	Stdout   []byte
	Stderr   []byte
	// Truncated marks the output as truncated.
	Truncated bool
	// RunningPolls is how many guest-exec-status calls report the process
	// still running before it exits.
	RunningPolls int
}

// ExecRequest is a guest-exec the Peer received.
type ExecRequest struct {
	Path          string
	Args          []string
	Env           []string
	Input         []byte
	CaptureOutput bool
}

// ExecFunc decides the outcome of a guest-exec.
type ExecFunc func(ExecRequest) Process

// Peer is a guest agent test peer listening on a unix socket in a test's
// temporary directory. It is closed by the test's cleanup.
type Peer struct {
	t    testing.TB
	path string
	ln   *net.UnixListener
	wg   sync.WaitGroup

	mu       sync.Mutex // guards the following fields
	conn     net.Conn
	cancel   context.CancelFunc
	conns    int
	delays   map[string]time.Duration
	commands []string
	files    map[string][]byte
	handles  map[int64]*handle
	nextH    int64
	procs    map[int64]*proc
	nextPID  int64
	exec     ExecFunc
	clock    time.Time
	shutdown string
	stale    []byte
}

type handle struct {
	path string
	pos  int
	mode string
}

type proc struct {
	p     Process
	polls int
	req   ExecRequest
}

// NewPeer starts a Peer. Its default ExecFunc exits 0 echoing the input to
// standard output, except for the path "false", which exits 1.
func NewPeer(t testing.TB) *Peer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qga.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatalf("qgatest: listen: %v", err)
	}
	p := &Peer{
		t: t, path: path, ln: ln,
		delays:  make(map[string]time.Duration),
		files:   make(map[string][]byte),
		handles: make(map[int64]*handle),
		nextH:   1000,
		procs:   make(map[int64]*proc),
		nextPID: 4000,
		exec: func(r ExecRequest) Process {
			if r.Path == "false" {
				return Process{ExitCode: 1}
			}
			return Process{Stdout: r.Input}
		},
	}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// SocketPath returns the path of the Peer's socket.
func (p *Peer) SocketPath() string { return p.path }

// SetExec replaces the function that scripts guest-exec.
func (p *Peer) SetExec(f ExecFunc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.exec = f
}

// Delay makes the Peer wait d before replying to command (0 removes the
// delay). Requests are served in order, so a delayed reply delays every
// request after it, as with the real agent.
func (p *Peer) Delay(command string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delays[command] = d
}

// Commands returns the names of the commands received, in order (requests
// discarded by a 0xFF reset are not included).
func (p *Peer) Commands() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.commands...)
}

// Connections returns how many connections the Peer has accepted.
func (p *Peer) Connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns
}

// SetFile creates or replaces a file in the Peer's in-memory file system.
func (p *Peer) SetFile(path string, data []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.files[path] = append([]byte(nil), data...)
}

// File returns a file's content and whether it exists.
func (p *Peer) File(path string) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d, ok := p.files[path]
	return append([]byte(nil), d...), ok
}

// OpenHandles returns how many file handles are open.
func (p *Peer) OpenHandles() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.handles)
}

// Clock returns the time last set with guest-set-time (zero if none).
func (p *Peer) Clock() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clock
}

// ShutdownMode returns the mode of the last guest-shutdown ("" if none;
// "powerdown" when the request named none).
func (p *Peer) ShutdownMode() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.shutdown
}

// SetStaleOnConnect makes the Peer send b as soon as it accepts a
// connection, like leftovers of an earlier client's conversation.
func (p *Peer) SetStaleOnConnect(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stale = append([]byte(nil), b...)
}

// SendRaw writes b to the connected client, if any, as stale or stray
// output would reach it.
func (p *Peer) SendRaw(b []byte) {
	p.mu.Lock()
	c := p.conn
	p.mu.Unlock()
	if c != nil {
		c.Write(b)
	}
}

// DropConnection closes the current connection, if any; the Peer keeps
// accepting.
func (p *Peer) DropConnection() {
	p.mu.Lock()
	c, cancel := p.conn, p.cancel
	p.mu.Unlock()
	if c != nil {
		cancel()
		c.Close()
	}
}

// Close stops the Peer and waits for its goroutines. It is idempotent.
func (p *Peer) Close() {
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
		p.mu.Lock()
		p.conn, p.cancel = c, cancel
		p.conns++
		stale := p.stale
		p.mu.Unlock()
		if len(stale) > 0 {
			c.Write(stale)
		}
		p.serve(ctx, c) // one client at a time, as QEMU's chardev socket
		cancel()
		c.Close()
		p.mu.Lock()
		p.conn, p.cancel = nil, nil
		p.mu.Unlock()
	}
}

// serve reads requests, splitting the byte stream into JSON objects by
// brace depth as the agent's streaming parser does, and answers each in
// order.
func (p *Peer) serve(ctx context.Context, c net.Conn) {
	var (
		obj      []byte
		depth    int
		inString bool
		escaped  bool
	)
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		for _, b := range buf[:n] {
			if b == 0xFF {
				obj, depth, inString, escaped = obj[:0], 0, false, false
				p.reply(c, nil, fmt.Errorf("JSON parse error, stray '\\xff'"))
				continue
			}
			if depth == 0 && b != '{' {
				continue // whitespace between requests
			}
			obj = append(obj, b)
			switch {
			case escaped:
				escaped = false
			case inString && b == '\\':
				escaped = true
			case b == '"':
				inString = !inString
			case !inString && b == '{':
				depth++
			case !inString && b == '}':
				depth--
				if depth == 0 {
					p.handle(ctx, c, obj)
					obj = obj[:0]
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// agentError is an error reply with a class.
type agentError struct{ class, desc string }

func (e *agentError) Error() string { return e.desc }

func (p *Peer) reply(c net.Conn, ret any, err error) {
	p.write(c, false, ret, err)
}

func (p *Peer) write(c net.Conn, delimited bool, ret any, err error) {
	var msg any
	if err != nil {
		class := "GenericError"
		if ae, ok := err.(*agentError); ok {
			class = ae.class
		}
		msg = map[string]any{"error": map[string]string{"class": class, "desc": err.Error()}}
	} else {
		if ret == nil {
			ret = struct{}{}
		}
		msg = map[string]any{"return": ret}
	}
	b, merr := json.Marshal(msg)
	if merr != nil {
		p.t.Errorf("qgatest: encode reply: %v", merr)
		return
	}
	if delimited {
		b = append([]byte{0xFF}, b...)
	}
	c.Write(append(b, '\n'))
}

func (p *Peer) handle(ctx context.Context, c net.Conn, raw []byte) {
	var req struct {
		Execute   string          `json:"execute"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(raw, &req); err != nil || req.Execute == "" {
		p.reply(c, nil, fmt.Errorf("Invalid JSON syntax"))
		return
	}
	p.mu.Lock()
	p.commands = append(p.commands, req.Execute)
	d := p.delays[req.Execute]
	p.mu.Unlock()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return
		}
	}
	ret, err := p.run(req.Execute, req.Arguments)
	switch {
	case req.Execute == "guest-sync-delimited" && err == nil:
		p.write(c, true, ret, nil)
	case req.Execute == "guest-shutdown" && err == nil:
		// No reply on success.
	default:
		p.reply(c, ret, err)
	}
}

func (p *Peer) run(command string, rawArgs json.RawMessage) (any, error) {
	var a struct {
		ID            *int64   `json:"id"`
		Path          string   `json:"path"`
		Arg           []string `json:"arg"`
		Env           []string `json:"env"`
		InputData     string   `json:"input-data"`
		CaptureOutput bool     `json:"capture-output"`
		PID           int64    `json:"pid"`
		Mode          *string  `json:"mode"`
		Handle        int64    `json:"handle"`
		Count         *int     `json:"count"`
		BufB64        string   `json:"buf-b64"`
		Time          *int64   `json:"time"`
	}
	if len(rawArgs) > 0 {
		if err := json.Unmarshal(rawArgs, &a); err != nil {
			return nil, fmt.Errorf("Invalid parameter: %v", err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch command {
	case "guest-sync-delimited", "guest-sync":
		if a.ID == nil {
			return nil, fmt.Errorf("Parameter 'id' is missing")
		}
		return *a.ID, nil
	case "guest-ping":
		return nil, nil
	case "guest-info":
		var cmds []map[string]any
		for _, n := range []string{"guest-sync-delimited", "guest-sync", "guest-ping", "guest-info", "guest-exec", "guest-exec-status",
			"guest-file-open", "guest-file-read", "guest-file-write", "guest-file-close", "guest-set-time", "guest-get-time"} {
			cmds = append(cmds, map[string]any{"name": n, "enabled": true, "success-response": true})
		}
		cmds = append(cmds, map[string]any{"name": "guest-shutdown", "enabled": true, "success-response": false})
		cmds = append(cmds, map[string]any{"name": "guest-fsfreeze-freeze", "enabled": false, "success-response": true})
		return map[string]any{"version": "7.2.0-qgatest", "supported_commands": cmds}, nil
	case "guest-exec":
		input, err := base64.StdEncoding.DecodeString(a.InputData)
		if err != nil {
			return nil, fmt.Errorf("Invalid parameter 'input-data'")
		}
		req := ExecRequest{Path: a.Path, Args: a.Arg, Env: a.Env, Input: input, CaptureOutput: a.CaptureOutput}
		if a.Path == "" || a.Path == "/nonexistent" {
			return nil, fmt.Errorf("Failed to execute child process \"%s\" (No such file or directory)", a.Path)
		}
		p.nextPID++
		p.procs[p.nextPID] = &proc{p: p.exec(req), req: req}
		return map[string]int64{"pid": p.nextPID}, nil
	case "guest-exec-status":
		pr, ok := p.procs[a.PID]
		if !ok {
			return nil, fmt.Errorf("Invalid parameter 'pid'")
		}
		if pr.polls < pr.p.RunningPolls {
			pr.polls++
			return map[string]any{"exited": false}, nil
		}
		delete(p.procs, a.PID) // reaped, as the agent does
		st := map[string]any{"exited": true}
		if pr.p.Signal != 0 {
			st["signal"] = pr.p.Signal
		} else {
			st["exitcode"] = pr.p.ExitCode
		}
		if pr.req.CaptureOutput {
			st["out-data"] = base64.StdEncoding.EncodeToString(pr.p.Stdout)
			st["err-data"] = base64.StdEncoding.EncodeToString(pr.p.Stderr)
			if pr.p.Truncated {
				st["out-truncated"] = true
			}
		}
		return st, nil
	case "guest-file-open":
		mode := "r"
		if a.Mode != nil {
			mode = *a.Mode
		}
		switch mode {
		case "r":
			if _, ok := p.files[a.Path]; !ok {
				return nil, fmt.Errorf("failed to open file '%s' (mode: 'r'): No such file or directory", a.Path)
			}
		case "w":
			p.files[a.Path] = nil
		case "a":
			if _, ok := p.files[a.Path]; !ok {
				p.files[a.Path] = nil
			}
		default:
			return nil, fmt.Errorf("invalid file open mode '%s'", mode)
		}
		p.nextH++
		h := &handle{path: a.Path, mode: mode}
		if mode == "a" {
			h.pos = len(p.files[a.Path])
		}
		p.handles[p.nextH] = h
		return p.nextH, nil
	case "guest-file-read":
		h, ok := p.handles[a.Handle]
		if !ok {
			return nil, fmt.Errorf("handle '%d' has not been found", a.Handle)
		}
		count := 4096
		if a.Count != nil {
			count = *a.Count
		}
		if count < 0 || count > 48<<20 {
			return nil, fmt.Errorf("value '%d' is invalid for argument count", count)
		}
		data := p.files[h.path]
		end := min(h.pos+count, len(data))
		chunk := data[h.pos:end]
		h.pos = end
		return map[string]any{"count": len(chunk), "buf-b64": base64.StdEncoding.EncodeToString(chunk), "eof": h.pos >= len(data)}, nil
	case "guest-file-write":
		h, ok := p.handles[a.Handle]
		if !ok {
			return nil, fmt.Errorf("handle '%d' has not been found", a.Handle)
		}
		b, err := base64.StdEncoding.DecodeString(a.BufB64)
		if err != nil {
			return nil, fmt.Errorf("Invalid parameter 'buf-b64'")
		}
		if a.Count != nil {
			b = b[:min(*a.Count, len(b))]
		}
		data := p.files[h.path]
		data = append(data[:h.pos], b...)
		p.files[h.path] = data
		h.pos += len(b)
		return map[string]any{"count": len(b), "eof": false}, nil
	case "guest-file-close":
		if _, ok := p.handles[a.Handle]; !ok {
			return nil, fmt.Errorf("handle '%d' has not been found", a.Handle)
		}
		delete(p.handles, a.Handle)
		return nil, nil
	case "guest-set-time":
		if a.Time == nil {
			p.clock = time.Now()
		} else {
			p.clock = time.Unix(0, *a.Time)
		}
		return nil, nil
	case "guest-get-time":
		if p.clock.IsZero() {
			return time.Now().UnixNano(), nil
		}
		return p.clock.UnixNano(), nil
	case "guest-shutdown":
		mode := "powerdown"
		if a.Mode != nil {
			mode = *a.Mode
		}
		if mode != "powerdown" && mode != "halt" && mode != "reboot" {
			return nil, fmt.Errorf("Invalid parameter 'mode'")
		}
		p.shutdown = mode
		return nil, nil
	}
	return nil, &agentError{"CommandNotFound", fmt.Sprintf("The command %s has not been found", command)}
}
