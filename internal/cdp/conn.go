package cdp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Conn is a CDP session with one target over its WebSocket. Commands may
// be sent from several goroutines at once; one goroutine, owned by the
// Conn, reads results and events until Close.
type Conn struct {
	ws     *websocket.Conn
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{} // closed when the read loop ends

	mu      sync.Mutex // guards the following fields
	nextID  int64
	pending map[int64]chan message
	subs    map[*subscription]struct{}
	err     error // why the read loop ended
}

// Error is an error a command answered with.
type Error struct {
	Method  string
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    string `json:"data,omitempty"`
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s (%d)", e.Method, e.Message, e.Code)
	if e.Data != "" {
		s += ": " + e.Data
	}
	return s
}

// Event is an event the target sent.
type Event struct {
	Method string
	Params json.RawMessage
}

// message is one message of the protocol, either way.
type message struct {
	ID     int64           `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// eventBuffer is how many events a subscription holds for its reader;
// past that, new ones are dropped (a reader waits for a state, and checks
// it again, rather than counting events).
const eventBuffer = 16

type subscription struct {
	method string
	ch     chan Event
}

// writeTimeout bounds the sending of one command.
const writeTimeout = 10 * time.Second

// ErrClosed: the session ended (Close, or the target went away).
var ErrClosed = errors.New("the CDP session ended")

func dialConn(ctx context.Context, tr *http.Transport, header http.Header, url string) (*Conn, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	// No Origin: DevTools refuses a WebSocket with one it was not told
	// to allow (coder/websocket sends none).
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}, HTTPHeader: header})
	if err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("open %s: %w", url, err)
	}
	return newConn(ws), nil
}

// newConn starts the read loop of ws.
func newConn(ws *websocket.Conn) *Conn {
	ws.SetReadLimit(MaxMessage)
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{ws: ws, cancel: cancel, done: make(chan struct{}), pending: map[int64]chan message{}, subs: map[*subscription]struct{}{}}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.readLoop(ctx)
	}()
	return c
}

// Close ends the session at once (no closing handshake: nothing is left
// to say, and the other side need not answer) and waits for its read
// loop. It is idempotent.
func (c *Conn) Close() error {
	c.cancel()
	c.ws.CloseNow()
	c.wg.Wait()
	return nil
}

func (c *Conn) readLoop(ctx context.Context) {
	var err error
	defer func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.done)
	}()
	for {
		var typ websocket.MessageType
		var b []byte
		typ, b, err = c.ws.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				err = ErrClosed
			} else {
				err = fmt.Errorf("%w: %w", ErrClosed, err)
			}
			return
		}
		if typ != websocket.MessageText {
			continue
		}
		var m message
		if json.Unmarshal(b, &m) != nil {
			continue // not CDP; the next may be
		}
		c.mu.Lock()
		if m.ID != 0 {
			if ch, ok := c.pending[m.ID]; ok {
				delete(c.pending, m.ID)
				ch <- m // buffered, one answer per id
			}
		} else if m.Method != "" {
			for s := range c.subs {
				if s.method != m.Method {
					continue
				}
				select {
				case s.ch <- Event{Method: m.Method, Params: m.Params}:
				default: // full: see eventBuffer
				}
			}
		}
		c.mu.Unlock()
	}
}

// Call sends command method with params (nil: none) and decodes its result
// into result (nil: dropped). It waits for the answer until ctx ends, or
// CallTimeout when ctx has no deadline. A command the target refuses is an
// *Error.
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	ch := make(chan message, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("%s: %w", method, err)
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	m := message{ID: id, Method: method}
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
		m.Params = b
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	// A write whose context ends midway closes the WebSocket: the
	// caller's deadline ends its wait for the answer below, not the
	// session. A peer that takes no message for writeTimeout does end it.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	err = c.ws.Write(wctx, websocket.MessageText, b)
	wcancel()
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			r.Error.Method = method
			return r.Error
		}
		if result == nil || len(r.Result) == 0 {
			return nil
		}
		if err := json.Unmarshal(r.Result, result); err != nil {
			return fmt.Errorf("%s: %w", method, err)
		}
		return nil
	case <-c.done:
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("%s: %w", method, err)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// Subscribe delivers the events named method from now on, until the
// returned stop is called or the session ends (the channel is never
// closed: select on Done as well). A subscription holds eventBuffer events
// its reader has not taken; later ones are dropped.
func (c *Conn) Subscribe(method string) (<-chan Event, func()) {
	s := &subscription{method: method, ch: make(chan Event, eventBuffer)}
	c.mu.Lock()
	c.subs[s] = struct{}{}
	c.mu.Unlock()
	return s.ch, func() {
		c.mu.Lock()
		delete(c.subs, s)
		c.mu.Unlock()
	}
}

// Done is closed when the session has ended; Err then says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the session ended, nil while it runs.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
