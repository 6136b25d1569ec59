// Package terminal gives a pseudo-terminal in a Linux guest: a program
// run on a PTY as the desktop's user, its input, output, window size and
// exit status carried in frames. A small helper (helper.py, run by the
// guest agent with the guest's python3) listens on a random port of the
// guest's own network for one connection, which only the host reaches
// (the backend dials it from the network's gateway) and which must first
// present the token the helper was started with.
package terminal

import (
	"bufio"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

//go:embed helper.py
var helper string

// Frame types. Input and Resize go to the guest; Output and Exit come
// from it.
const (
	Input  byte = 0
	Resize byte = 1
	Output byte = 0
	Exit   byte = 3
)

// MaxPayload bounds a frame's payload.
const MaxPayload = 1 << 16

// Bounds of a request.
const (
	MaxArgs    = 64
	MaxArgLen  = 4096
	MaxRows    = 1000
	MaxColumns = 1000
)

// Guest is what Open needs of the sandboxes: to start a program in the
// guest and to reach one of its ports.
type Guest interface {
	Exec(ctx context.Context, name string, req backend.ExecRequest) (backend.ExecResult, error)
	DialPort(ctx context.Context, name string, port int) (net.Conn, error)
}

// Request is the program to run and the terminal's size.
type Request struct {
	// User runs it: the desktop's user.
	User string
	// Argv is the program and its arguments; empty runs the user's login
	// shell.
	Argv []string
	Rows int
	Cols int
	// Term is TERM (xterm-256color when empty).
	Term string
}

// Check returns a FieldError naming what is out of bounds in r.
func (r Request) Check() error {
	if len(r.Argv) > MaxArgs {
		return api.Invalid("command", "%d arguments: at most %d", len(r.Argv), MaxArgs)
	}
	for i, a := range r.Argv {
		if len(a) > MaxArgLen {
			return api.Invalid(fmt.Sprintf("command[%d]", i), "%d bytes: at most %d", len(a), MaxArgLen)
		}
	}
	if len(r.Argv) > 0 && r.Argv[0] == "" {
		return api.Invalid("command[0]", "empty")
	}
	if r.Rows < 0 || r.Rows > MaxRows {
		return api.Invalid("rows", "%d is out of range 1..%d", r.Rows, MaxRows)
	}
	if r.Cols < 0 || r.Cols > MaxColumns {
		return api.Invalid("cols", "%d is out of range 1..%d", r.Cols, MaxColumns)
	}
	if len(r.Term) > 64 {
		return api.Invalid("term", "at most 64 bytes")
	}
	return nil
}

// dialFor bounds how long Open waits for the helper to listen.
const dialFor = 30 * time.Second

// Open starts the helper in sandbox name and returns the session, its
// token presented. The caller closes it; closing ends the program.
func Open(ctx context.Context, g Guest, name string, r Request) (*Conn, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	n, err := rand.Int(rand.Reader, big.NewInt(40000))
	if err != nil {
		return nil, err
	}
	port := 20000 + int(n.Int64())
	token := hex.EncodeToString(tok)
	cfg, err := json.Marshal(map[string]any{"token": token, "user": r.User, "argv": r.Argv, "rows": r.Rows, "cols": r.Cols, "term": r.Term})
	if err != nil {
		return nil, err
	}
	// The configuration, token included, goes on standard input: never on
	// the command line, which other programs of the guest can read.
	if _, err := g.Exec(ctx, name, backend.ExecRequest{Path: "python3", Args: []string{"-c", helper, fmt.Sprint(port)}, Stdin: append(cfg, '\n'), Detach: true}); err != nil {
		return nil, fmt.Errorf("start the terminal in the guest: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, dialFor)
	defer cancel()
	var c net.Conn
	for {
		if c, err = g.DialPort(dctx, name, port); err == nil {
			break
		}
		if errors.Is(err, api.ErrConflict) || errors.Is(err, api.ErrUnsupported) || errors.Is(err, api.ErrNotFound) {
			return nil, fmt.Errorf("reach the terminal in the guest: %w", err)
		}
		select {
		case <-dctx.Done():
			return nil, fmt.Errorf("the terminal in the guest did not answer within %s (its python3 and network are needed): %v: %w", dialFor, err, api.ErrUnavailable)
		case <-time.After(150 * time.Millisecond):
		}
	}
	if _, err := io.WriteString(c, token+"\n"); err != nil {
		c.Close()
		return nil, err
	}
	return &Conn{c: c, br: bufio.NewReaderSize(c, MaxPayload+5)}, nil
}

// Conn is one terminal session.
type Conn struct {
	c   net.Conn
	br  *bufio.Reader
	wmu sync.Mutex
}

// Send writes one frame to the guest.
func (c *Conn) Send(kind byte, data []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return WriteFrame(c.c, kind, data)
}

// Write sends p as input.
func (c *Conn) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += MaxPayload {
		if err := c.Send(Input, p[off:min(len(p), off+MaxPayload)]); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

// SetSize sends the terminal's new size.
func (c *Conn) SetSize(rows, cols int) error {
	return c.Send(Resize, ResizePayload(rows, cols))
}

// Next reads the next frame from the guest: Output, or Exit (then the
// session is over).
func (c *Conn) Next() (kind byte, data []byte, err error) {
	return ReadFrame(c.br)
}

// Close ends the session and the program.
func (c *Conn) Close() error { return c.c.Close() }

// WriteFrame writes a frame: its type, its length (4 bytes, big-endian)
// and its payload.
func WriteFrame(w io.Writer, kind byte, data []byte) error {
	if len(data) > MaxPayload {
		return fmt.Errorf("a terminal frame of %d bytes: at most %d", len(data), MaxPayload)
	}
	b := make([]byte, 5+len(data))
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:5], uint32(len(data)))
	copy(b[5:], data)
	_, err := w.Write(b)
	return err
}

// ReadFrame reads a frame written by WriteFrame.
func ReadFrame(r io.Reader) (kind byte, data []byte, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > MaxPayload {
		return 0, nil, fmt.Errorf("a terminal frame of %d bytes: at most %d", n, MaxPayload)
	}
	data = make([]byte, n)
	if _, err := io.ReadFull(r, data); err != nil {
		return 0, nil, err
	}
	return h[0], data, nil
}

// ResizePayload is a Resize frame's payload: rows and columns, 2 bytes
// each, big-endian.
func ResizePayload(rows, cols int) []byte {
	var b [4]byte
	binary.BigEndian.PutUint16(b[0:], uint16(min(max(rows, 1), MaxRows)))
	binary.BigEndian.PutUint16(b[2:], uint16(min(max(cols, 1), MaxColumns)))
	return b[:]
}

// ExitCode reads an Exit frame's payload.
func ExitCode(data []byte) int {
	if len(data) != 4 {
		return -1
	}
	return int(int32(binary.BigEndian.Uint32(data)))
}
