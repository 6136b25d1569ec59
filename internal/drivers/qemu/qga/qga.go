// Package qga is a client for the QEMU guest agent (qemu-ga), the daemon
// inside a guest that runs commands, reads and writes files and sets the
// clock on the host's behalf. QEMU exposes the agent's virtio-serial port as
// a unix socket on the host (-chardev socket,path=PATH,server=on,wait=off
// plus a virtserialport named org.qemu.guest_agent.0).
//
// The protocol is QMP-like JSON with two differences that shape this client:
//
//   - Replies carry no id, so requests are strictly sequential: one request,
//     then its reply.
//   - Nothing marks where a conversation starts. The agent sends no greeting,
//     and bytes from an earlier client — a reply that arrived after its
//     requester gave up, half a request — can still be in the pipe. Before
//     its first request on a connection, and again after any timeout, the
//     client therefore resynchronises with guest-sync-delimited: it sends a
//     0xFF byte (which makes the agent drop any partial input), then the
//     command with a random id, and discards everything it receives up to the
//     agent's 0xFF sentinel and the reply carrying that id. A late reply can
//     thus never be taken for the answer to a later request.
//
// QEMU's chardev socket serves one client at a time, and a client that keeps
// it open blocks every other one. Hence the design: one Client per VM, shared
// by everything that talks to that guest. A Client keeps its connection open
// and serialises requests with a lock that waiting callers can abandon when
// their ctx ends; it dials lazily and redials after a connection error.
//
// Agent error replies become *Error. A request whose ctx ends returns the ctx
// error; the agent may still carry the request out (a guest-exec may still
// start its process), because the request may already be in the guest.
package qga

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("qga: client closed")

// Error is an error reply from the guest agent.
type Error struct {
	// Class is the error class, e.g. "GenericError", "CommandNotFound".
	Class string `json:"class"`
	// Desc describes the error.
	Desc string `json:"desc"`
}

// Error implements error.
func (e *Error) Error() string { return e.Class + ": " + e.Desc }

// sentinel is the byte the agent puts before its reply to
// guest-sync-delimited and that a client sends to reset the agent's parser.
// It never occurs in JSON text.
const sentinel = 0xFF

// DefaultChunkSize is how many bytes FileRead and FileWrite move per
// request. The agent accepts up to 48 MiB per read; 1 MiB keeps each reply
// line modest while needing few round trips.
const DefaultChunkSize = 1 << 20

// Option configures a Client.
type Option func(*Client)

// WithChunkSize sets how many bytes FileRead and FileWrite move per request
// (default DefaultChunkSize).
func WithChunkSize(n int) Option {
	return func(c *Client) {
		if n > 0 {
			c.chunkSize = n
		}
	}
}

// WithDialer replaces how the Client connects (default: the unix socket
// given to New).
func WithDialer(dial func(ctx context.Context) (net.Conn, error)) Option {
	return func(c *Client) { c.dial = dial }
}

// Client talks to one guest agent. It is safe for concurrent use; requests
// run one at a time.
type Client struct {
	// liveMu guards live, the connection as Abort sees it: Abort must not
	// wait for the request lock.
	liveMu sync.Mutex
	live   net.Conn

	dial      func(ctx context.Context) (net.Conn, error)
	chunkSize int

	// sem is the request lock: a token in the channel means free. A channel
	// rather than a sync.Mutex so that a caller waiting for it can give up
	// when its ctx ends.
	sem chan struct{}

	// Guarded by sem:
	conn   net.Conn
	br     *bufio.Reader
	dirty  bool // the stream may hold stale bytes: resync before the next request
	closed bool
}

// New returns a Client for the guest agent socket at socketPath. It does not
// connect; the first request does.
func New(socketPath string, opts ...Option) *Client {
	c := &Client{
		dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socketPath)
		},
		chunkSize: DefaultChunkSize,
		sem:       make(chan struct{}, 1),
	}
	c.sem <- struct{}{}
	for _, o := range opts {
		o(c)
	}
	return c
}

// lock takes the request lock, or gives up when ctx ends.
func (c *Client) lock(ctx context.Context) error {
	select {
	case <-c.sem:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (c *Client) unlock() { c.sem <- struct{}{} }

// Hold waits for the request in progress, if any, to end, and keeps
// others from starting until release is called: the guest's agent is idle
// meanwhile (a VM saved with it idle comes back with no request half
// read or half answered).
func (c *Client) Hold(ctx context.Context) (release func(), err error) {
	if err := c.lock(ctx); err != nil {
		return nil, err
	}
	return c.unlock, nil
}

// Abort closes the connection at once, failing a request in progress
// instead of waiting for it; the next request dials again. Use it when the
// guest cannot answer (paused, saved or gone).
func (c *Client) Abort() {
	c.liveMu.Lock()
	defer c.liveMu.Unlock()
	if c.live != nil {
		c.live.Close()
	}
}

// Busy reports whether a request is in progress (a hint: it may end or
// start right after).
func (c *Client) Busy() bool {
	select {
	case <-c.sem:
		c.sem <- struct{}{}
		return false
	default:
		return true
	}
}

// Close closes the connection, letting other clients reach the agent, and
// makes later calls fail with ErrClosed. A request in progress fails. It is
// idempotent.
func (c *Client) Close() error {
	c.Abort()
	<-c.sem
	defer c.unlock()
	c.closed = true
	c.dropConnLocked()
	return nil
}

// Disconnect closes the connection but keeps the Client usable: the next
// request dials again. Use it to let another client (a debugging tool) reach
// the agent. It waits for a request in progress to end.
func (c *Client) Disconnect() {
	<-c.sem
	defer c.unlock()
	c.dropConnLocked()
}

func (c *Client) dropConnLocked() {
	if c.conn != nil {
		c.conn.Close()
	}
	c.conn, c.br, c.dirty = nil, nil, false
	c.liveMu.Lock()
	c.live = nil
	c.liveMu.Unlock()
}

// do runs one request: it connects and resynchronises as needed, sends the
// command and decodes the reply's "return" into result (if not nil).
func (c *Client) do(ctx context.Context, command string, args, result any) error {
	if err := c.lock(ctx); err != nil {
		return fmt.Errorf("qga %s: %w", command, err)
	}
	defer c.unlock()
	if err := c.requestLocked(ctx, command, args, result, true); err != nil {
		return fmt.Errorf("qga %s: %w", command, err)
	}
	return nil
}

// requestLocked sends a request and, if wantReply, reads its reply.
func (c *Client) requestLocked(ctx context.Context, command string, args, result any, wantReply bool) error {
	if c.closed {
		return ErrClosed
	}
	req, err := json.Marshal(struct {
		Execute   string `json:"execute"`
		Arguments any    `json:"arguments,omitempty"`
	}{command, args})
	if err != nil {
		return fmt.Errorf("encode arguments: %w", err)
	}
	for attempt := 0; ; attempt++ {
		reused := c.conn != nil
		err := c.readyLocked(ctx)
		if err == nil {
			err = c.sendLocked(ctx, req, result, wantReply)
		}
		// A connection kept from an earlier request may have died in the
		// meantime (QEMU restarted, the VM was restored). If it fails before
		// the request could reach the agent, dial once more.
		var ioe ioError
		if err != nil && reused && attempt == 0 && errors.As(err, &ioe) && !ioe.sent {
			continue
		}
		return err
	}
}

// sendLocked writes one request and, if wantReply, reads its reply.
func (c *Client) sendLocked(ctx context.Context, req []byte, result any, wantReply bool) error {
	return c.exchangeLocked(ctx, func() error {
		if _, err := c.conn.Write(append(req, '\n')); err != nil {
			return ioError{err: err} // nothing, or a fragment the next sync's 0xFF discards
		}
		if !wantReply {
			// The agent answers only on failure; whatever comes is stale
			// to the next request, which must resync first.
			c.dirty = true
			return nil
		}
		line, err := c.readLineLocked()
		if err != nil {
			return ioError{err: err, sent: true}
		}
		var resp struct {
			Return json.RawMessage `json:"return"`
			Error  *Error          `json:"error"`
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			c.dirty = true // not the reply we wait for; where it ends is unknown
			return fmt.Errorf("decode reply: %w", err)
		}
		if resp.Error != nil {
			return resp.Error
		}
		if resp.Return == nil {
			c.dirty = true
			return fmt.Errorf("reply without return or error: %.200s", line)
		}
		if result != nil {
			if err := json.Unmarshal(resp.Return, result); err != nil {
				return fmt.Errorf("decode reply: %w", err)
			}
		}
		return nil
	})
}

// readyLocked makes sure there is a connection whose stream is in sync.
func (c *Client) readyLocked(ctx context.Context) error {
	if c.conn == nil {
		conn, err := c.dial(ctx)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		c.conn, c.br, c.dirty = conn, bufio.NewReaderSize(conn, 64<<10), true
		c.liveMu.Lock()
		c.live = conn
		c.liveMu.Unlock()
	}
	if !c.dirty {
		return nil
	}
	return c.syncLocked(ctx)
}

// syncLocked resynchronises the stream with guest-sync-delimited.
func (c *Client) syncLocked(ctx context.Context) error {
	id := rand.Int64N(1 << 53) // stays exact even if a JSON layer uses float64
	req, _ := json.Marshal(map[string]any{"execute": "guest-sync-delimited", "arguments": map[string]int64{"id": id}})
	msg := append([]byte{sentinel}, req...)
	msg = append(msg, '\n')
	err := c.exchangeLocked(ctx, func() error {
		if _, err := c.conn.Write(msg); err != nil {
			return ioError{err: err}
		}
		for {
			// Skip everything up to the sentinel: stale replies, partial
			// lines, the agent's complaint about our 0xFF.
			if _, err := c.br.ReadSlice(sentinel); err != nil {
				if errors.Is(err, bufio.ErrBufferFull) {
					continue
				}
				return ioError{err: err}
			}
			line, err := c.readLineLocked()
			if err != nil {
				return ioError{err: err} // a sync is harmless to repeat
			}
			var resp struct {
				Return *int64 `json:"return"`
			}
			if json.Unmarshal(line, &resp) == nil && resp.Return != nil && *resp.Return == id {
				return nil
			}
			// The reply to an earlier sync: keep looking.
		}
	})
	if err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	c.dirty = false
	return nil
}

// ioError marks a failure of the connection itself.
type ioError struct {
	err  error
	sent bool // the request may have reached the agent, so it must not be retried
}

func (e ioError) Error() string { return e.err.Error() }
func (e ioError) Unwrap() error { return e.err }

// exchangeLocked runs fn, which reads and writes c.conn, with I/O deadlines
// following ctx. If ctx ends during the exchange, the stream is marked dirty
// (a reply may still come). If the connection fails, it is dropped, and the
// next request redials. fn marks the stream dirty itself for protocol
// errors; an agent error reply leaves it in sync.
func (c *Client) exchangeLocked(ctx context.Context, fn func() error) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	conn := c.conn
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		conn.SetDeadline(time.Unix(1, 0)) // interrupts fn's blocked read or write
		close(fired)
	})
	err := fn()
	if !stop() {
		// ctx ended during the exchange: whatever fn got, it was cut short,
		// and a reply may still come. Wait for the callback so that clearing
		// its deadline cannot race with it.
		<-fired
		conn.SetDeadline(time.Time{})
		c.dirty = true
		return context.Cause(ctx)
	}
	var ioe ioError
	if errors.As(err, &ioe) {
		c.dropConnLocked()
	}
	return err
}

// readLineLocked reads one newline-terminated reply, without the newline.
func (c *Client) readLineLocked() ([]byte, error) {
	line, err := c.br.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	return bytes.TrimRight(line, "\r\n"), nil
}
