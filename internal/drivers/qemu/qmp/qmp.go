// Package qmp is a small client for the QEMU Machine Protocol (QMP), the
// JSON control channel QEMU serves on a unix socket
// (-qmp unix:PATH,server=on,wait=off).
//
// A Monitor owns one connection. A single reader goroutine reads everything
// QEMU sends: command replies are routed to the waiting caller by the "id"
// member every command carries, so Execute is safe for concurrent use and
// replies may arrive in any order; asynchronous events are fanned out to
// subscribers without ever blocking the reader.
//
// Errors:
//   - a reply of the form {"error": {"class": ..., "desc": ...}} becomes a
//     *Error, reachable with errors.As;
//   - when the connection ends because QEMU went away, every pending and later
//     call fails with an error wrapping io.EOF, and Done is closed;
//   - after Close, calls fail with an error wrapping net.ErrClosed.
//
// QEMU serves one QMP client per socket at a time: while a Monitor is
// connected, a second Dial to the same socket waits (until its ctx ends) for
// the first connection to close.
package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// EventBuffer is the number of events a Subscription buffers. When a
// subscriber falls this far behind, further events for it are dropped (and
// counted by Subscription.Dropped) rather than blocking the reader.
const EventBuffer = 64

// Error is an error reply from QEMU.
type Error struct {
	// Class is QEMU's error class, e.g. "GenericError", "CommandNotFound",
	// "DeviceNotFound".
	Class string `json:"class"`
	// Desc is QEMU's human-readable description.
	Desc string `json:"desc"`
}

// Error implements error.
func (e *Error) Error() string { return e.Class + ": " + e.Desc }

// Event is an asynchronous QMP event such as STOP, RESUME, SHUTDOWN or
// MIGRATION.
type Event struct {
	// Name is the event name, e.g. "SHUTDOWN".
	Name string
	// Data is the event's "data" member, nil if it had none.
	Data json.RawMessage
	// Timestamp is when QEMU emitted the event (zero if QEMU sent none).
	Timestamp time.Time
}

// Version is the QEMU version announced in the QMP greeting.
type Version struct {
	Major, Minor, Micro int
	// Package is the distribution's package string, e.g.
	// "Debian 1:7.2+dfsg-7".
	Package string
}

// String returns the version as "major.minor.micro".
func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro)
}

// AtLeast reports whether v is major.minor or newer.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || (v.Major == major && v.Minor >= minor)
}

// Monitor is a connected QMP client. All methods are safe for concurrent
// use.
type Monitor struct {
	conn    *net.UnixConn
	version Version
	nextID  atomic.Uint64

	wmu sync.Mutex // serialises writes, so commands are never interleaved on the wire

	wguard  sync.Mutex // guards the following fields, which let a cancelled ctx interrupt only its own write
	wseq    uint64
	wactive bool

	mu      sync.Mutex // guards the following fields
	pending map[uint64]chan reply
	subs    map[*Subscription]struct{}
	err     error // why the monitor stopped; nil while it runs

	done       chan struct{} // closed when the monitor stops
	readerDone chan struct{} // closed when the reader goroutine has returned
}

type reply struct {
	ret json.RawMessage
	err error
}

// message is anything QEMU sends: greeting, reply or event.
type message struct {
	QMP       *greeting       `json:"QMP"`
	ID        json.RawMessage `json:"id"`
	Return    json.RawMessage `json:"return"`
	Error     *Error          `json:"error"`
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp *struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
}

type greeting struct {
	Version struct {
		QEMU struct {
			Major int `json:"major"`
			Minor int `json:"minor"`
			Micro int `json:"micro"`
		} `json:"qemu"`
		Package string `json:"package"`
	} `json:"version"`
	Capabilities []string `json:"capabilities"`
}

type request struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
	ID        uint64 `json:"id"`
}

// Dial connects to the QMP socket at socketPath, reads QEMU's greeting and
// negotiates capabilities (qmp_capabilities), after which the Monitor accepts
// commands. ctx bounds the whole handshake; it does not bound the life of the
// Monitor, which lasts until Close or until QEMU goes away.
func Dial(ctx context.Context, socketPath string) (*Monitor, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("qmp dial %s: %w", socketPath, err)
	}
	m, err := handshake(ctx, c.(*net.UnixConn))
	if err != nil {
		return nil, fmt.Errorf("qmp dial %s: %w", socketPath, err)
	}
	return m, nil
}

func handshake(ctx context.Context, conn *net.UnixConn) (*Monitor, error) {
	dec := json.NewDecoder(conn)

	// The greeting is read before the reader goroutine exists; when ctx ends
	// (deadline or cancel) a read deadline in the past interrupts the read.
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	var g message
	err := dec.Decode(&g)
	if !stop() {
		conn.Close()
		return nil, fmt.Errorf("read greeting: %w", context.Cause(ctx))
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("read greeting: %w", err)
	}
	if g.QMP == nil {
		conn.Close()
		return nil, errors.New("read greeting: first message is not a QMP greeting")
	}

	m := &Monitor{
		conn: conn,
		version: Version{
			Major:   g.QMP.Version.QEMU.Major,
			Minor:   g.QMP.Version.QEMU.Minor,
			Micro:   g.QMP.Version.QEMU.Micro,
			Package: g.QMP.Version.Package,
		},
		pending:    make(map[uint64]chan reply),
		subs:       make(map[*Subscription]struct{}),
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
	}
	go m.read(dec)
	if err := m.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Version returns the QEMU version from the greeting.
func (m *Monitor) Version() Version { return m.version }

// Done returns a channel that is closed when the Monitor stops: QEMU closed
// the connection (it exited or was killed), a protocol error occurred, or
// Close was called. Err then says why.
func (m *Monitor) Done() <-chan struct{} { return m.done }

// Err returns nil while the Monitor runs and, once Done is closed, the reason
// it stopped: an error wrapping io.EOF if the connection was lost, or
// net.ErrClosed after Close.
func (m *Monitor) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Close closes the connection. Pending calls return an error wrapping
// net.ErrClosed, subscriptions' channels are closed, and Close waits for the
// reader goroutine to exit. Close is idempotent and always returns nil; it
// does not stop QEMU (see Quit).
func (m *Monitor) Close() error {
	m.stop(fmt.Errorf("qmp monitor closed: %w", net.ErrClosed))
	<-m.readerDone
	return nil
}

// Execute runs a QMP command and waits for its reply. args, if not nil, is
// marshalled as the command's "arguments"; result, if not nil, receives the
// reply's "return" value via json.Unmarshal.
//
// If ctx ends first, Execute returns the ctx error at once; the command may
// still take effect in QEMU, and its late reply is discarded (it can never be
// mistaken for the reply to another call, since replies are matched by id).
// A QMP error reply is returned as a wrapped *Error.
func (m *Monitor) Execute(ctx context.Context, command string, args, result any) error {
	return m.execute(ctx, command, args, result, nil)
}

func (m *Monitor) execute(ctx context.Context, command string, args, result any, oob []byte) error {
	id := m.nextID.Add(1)
	b, err := json.Marshal(request{Execute: command, Arguments: args, ID: id})
	if err != nil {
		return fmt.Errorf("qmp %s: encode arguments: %w", command, err)
	}
	b = append(b, '\n')

	ch := make(chan reply, 1)
	m.mu.Lock()
	if m.err != nil {
		err := m.err
		m.mu.Unlock()
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	m.pending[id] = ch
	m.mu.Unlock()

	if err := m.write(ctx, b, oob); err != nil {
		m.forget(id)
		if stopped := m.Err(); stopped != nil {
			err = stopped
		}
		return fmt.Errorf("qmp %s: %w", command, err)
	}

	select {
	case r := <-ch:
		if r.err != nil {
			return fmt.Errorf("qmp %s: %w", command, r.err)
		}
		if result != nil && len(r.ret) > 0 {
			if err := json.Unmarshal(r.ret, result); err != nil {
				return fmt.Errorf("qmp %s: decode reply: %w", command, err)
			}
		}
		return nil
	case <-ctx.Done():
		m.forget(id)
		return fmt.Errorf("qmp %s: %w", command, context.Cause(ctx))
	}
}

// forget removes a pending call whose caller has given up. A reply that
// arrives later finds no waiter and is dropped.
func (m *Monitor) forget(id uint64) {
	m.mu.Lock()
	delete(m.pending, id)
	m.mu.Unlock()
}

// write sends one command. A write blocked because QEMU stopped reading is
// interrupted when ctx ends (a write deadline in the past, set only while
// this write is the active one); a write that put part of a command on the wire
// leaves the stream unusable, so it stops the Monitor.
func (m *Monitor) write(ctx context.Context, b, oob []byte) error {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	if err := context.Cause(ctx); err != nil {
		return err
	}

	m.wguard.Lock()
	m.wseq++
	seq := m.wseq
	m.wactive = true
	m.conn.SetWriteDeadline(time.Time{})
	m.wguard.Unlock()
	stop := context.AfterFunc(ctx, func() {
		m.wguard.Lock()
		if m.wactive && m.wseq == seq {
			m.conn.SetWriteDeadline(time.Unix(1, 0))
		}
		m.wguard.Unlock()
	})

	var n int
	var err error
	if oob != nil {
		n, _, err = m.conn.WriteMsgUnix(b, oob, nil)
		if err == nil && n < len(b) {
			var k int
			k, err = m.conn.Write(b[n:])
			n += k
		}
	} else {
		n, err = m.conn.Write(b)
	}

	stop()
	m.wguard.Lock()
	m.wactive = false
	m.wguard.Unlock()

	if err == nil {
		return nil
	}
	if n > 0 {
		m.stop(fmt.Errorf("qmp connection unusable after partial write: %w: %w", io.EOF, err))
	}
	if cerr := context.Cause(ctx); cerr != nil {
		return cerr
	}
	return err
}

// read is the reader goroutine: it owns the decoder and runs until the
// connection fails.
func (m *Monitor) read(dec *json.Decoder) {
	defer close(m.readerDone)
	for {
		var msg message
		if err := dec.Decode(&msg); err != nil {
			m.stop(lostError(err))
			return
		}
		switch {
		case msg.Event != "":
			m.dispatchEvent(msg)
		case msg.ID != nil:
			m.dispatchReply(msg)
		default:
			// A reply without an id answers input QEMU could not parse (every
			// command sent here carries an id); nobody waits for it.
		}
	}
}

func lostError(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("qmp connection lost: %w", err)
	}
	return fmt.Errorf("qmp connection lost: %w: %w", io.EOF, err)
}

func (m *Monitor) dispatchReply(msg message) {
	id, err := strconv.ParseUint(string(msg.ID), 10, 64)
	if err != nil {
		return // not an id this client sent
	}
	m.mu.Lock()
	ch, ok := m.pending[id]
	delete(m.pending, id)
	m.mu.Unlock()
	if !ok {
		return // the caller gave up (ctx ended); drop the late reply
	}
	if msg.Error != nil {
		ch <- reply{err: msg.Error}
		return
	}
	ch <- reply{ret: msg.Return}
}

func (m *Monitor) dispatchEvent(msg message) {
	ev := Event{Name: msg.Event, Data: msg.Data}
	if ts := msg.Timestamp; ts != nil && ts.Seconds >= 0 {
		ev.Timestamp = time.Unix(ts.Seconds, ts.Microseconds*1000)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for s := range m.subs {
		if s.names != nil && !s.names[ev.Name] {
			continue
		}
		select {
		case s.c <- ev:
		default:
			s.dropped.Add(1)
		}
	}
}

// stop records why the Monitor stopped (the first reason wins), fails every
// pending call, closes subscriptions and the connection, and closes done.
func (m *Monitor) stop(reason error) {
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return
	}
	m.err = reason
	pending := m.pending
	m.pending = nil
	subs := m.subs
	m.subs = nil
	m.mu.Unlock()

	for _, ch := range pending {
		ch <- reply{err: reason}
	}
	for s := range subs {
		close(s.c)
	}
	m.conn.Close()
	close(m.done)
}

// Subscription receives asynchronous events. Create one with
// Monitor.Subscribe.
type Subscription struct {
	// C delivers events in the order QEMU sent them. It is closed by Cancel
	// or when the Monitor stops.
	C <-chan Event

	c       chan Event
	m       *Monitor
	names   map[string]bool // nil: all events
	dropped atomic.Uint64
}

// Subscribe returns a subscription to events whose name is one of names, or
// to all events if names is empty. Each subscription buffers EventBuffer
// events; when its reader falls behind, newer events are dropped for that
// subscription only (see Dropped), so a slow subscriber never delays
// replies or other subscribers. Call Cancel when done. Subscribing to a
// stopped Monitor returns a subscription whose channel is already closed.
func (m *Monitor) Subscribe(names ...string) *Subscription {
	c := make(chan Event, EventBuffer)
	s := &Subscription{C: c, c: c, m: m}
	if len(names) > 0 {
		s.names = make(map[string]bool, len(names))
		for _, n := range names {
			s.names[n] = true
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.subs == nil {
		close(c)
		return s
	}
	m.subs[s] = struct{}{}
	return s
}

// Cancel ends the subscription and closes C. It is idempotent.
func (s *Subscription) Cancel() {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if _, ok := s.m.subs[s]; ok {
		delete(s.m.subs, s)
		close(s.c)
	}
}

// Dropped returns how many events were dropped because C was full.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }
