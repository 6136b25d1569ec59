package qemu

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	stdimage "image"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvkube/hvkube/internal/display"
)

// A kept screen is a copy of a sandbox's screen that its VNC server keeps
// current: an RFB client on the VNC socket asks for raw 32-bit pixels in
// QEMU's own layout, keeps one incremental update request outstanding,
// and applies each update to its copy, noting which rows changed. A
// screenshot is then an encoding of the copy: an unchanged screen costs no
// call to QEMU at all, and a changed one only the changed strips'
// compression (display.PNGStrips).
//
// Freshness. QEMU (7.2) sends what changed only at its display refresh, a
// timer that runs every 30 ms while the screen changes and backs off by
// 50 ms for each refresh that finds nothing, to 3 s; a change the guest
// makes on its own after a quiet spell of 20 s reaches a client 0.3-0.9 s
// late. Resuming a paused VM does not reset it. Any client message but the
// first four kinds does: the interval goes back to 30 ms, and the refresh
// comes at once if the last one is older. The kept screen sends a KeyEvent
// releasing KP_Equal, a key that is not down: QEMU's VNC keyboard state
// drops the release of a key that is not pressed, so the guest sees no
// event. (The keyboard state is shared by all VNC clients: a viewer that
// holds KP_Equal down has it released by a nudge. No modifier or lock is
// touched.) That "nudge" goes with every screenshot and every input sent,
// and while someone looks (a screenshot or an input within lookWindow) one
// goes every nudgeEvery, which holds the refresh at 30 ms. So:
//
//   - while someone looks, a screenshot is the screen as of QEMU's last
//     display refresh: at most about one refresh (30 ms) plus the update's
//     transfer older than the request;
//   - the first screenshot after a quiet spell (no look for lookWindow; or
//     within nudgeSettled of an input that ended one) first waits for a
//     refresh that follows its request, one round trip to QEMU of a
//     millisecond or less when QEMU is idle, so it is never older than the
//     request;
//   - a sandbox nobody looks at costs nothing: no connection is made before
//     its first screenshot, nudges stop lookWindow after the last look,
//     and a connection unused for keptIdle is closed (an idle connection
//     costs QEMU no measurable CPU, but the copy and its encodings hold
//     several megabytes). Nudging every 25 ms costs QEMU about 2% of a
//     core under TCG while it lasts.
//
// If the connection cannot be made or breaks, screenshots fall back to
// QMP's screendump, and try again after keptRetry.

const (
	// nudgeKeysym is the X keysym the nudge releases: XK_KP_Equal.
	nudgeKeysym = 0xffbd
	// nudgeEvery keeps QEMU's display refresh at its fastest (30 ms)
	// while someone looks.
	nudgeEvery = 25 * time.Millisecond
	// lookWindow is how long after a screenshot or an input the refresh is
	// held at its fastest.
	lookWindow = 3 * time.Second
	// nudgeSettled is how long nudging must have gone on before the copy
	// is taken to be within one fast refresh of the screen.
	nudgeSettled = 60 * time.Millisecond
	// keptIdle closes a connection no screenshot used for this long.
	keptIdle = 2 * time.Minute
	// keptRetry is how long screenshots use screendump after the kept
	// screen failed.
	keptRetry = 10 * time.Second
	// keptFirstFrame bounds the wait for the first full update after
	// connecting, and for a refresh after a quiet spell.
	keptFirstFrame = 2 * time.Second
)

// RFB message types and encodings used here (RFC 6143).
const (
	rfbSetPixelFormat      = 0
	rfbSetEncodings        = 2
	rfbUpdateRequest       = 3
	rfbKeyEvent            = 4
	rfbFramebufferUpdate   = 0
	rfbSetColourMap        = 1
	rfbBell                = 2
	rfbServerCutText       = 3
	rfbEncodingRaw         = 0
	rfbEncodingDesktopSize = -223
)

// screen is where a sandbox keeps its kept screen. It is safe for
// concurrent use.
type screen struct{ p atomic.Pointer[keptScreen] }

// load returns the kept screen, nil if there is none.
func (s *screen) load() *keptScreen { return s.p.Load() }

// close closes the kept screen, if there is one: the VM's process is gone,
// or the backend closes. The next screenshot makes a new one.
func (s *screen) close() { s.p.Swap(nil).close() }

// errKeptIdle ends a kept screen nobody looked at for keptIdle.
var errKeptIdle = errors.New("kept screen idle")

// keptScreen is one sandbox's kept screen. It is safe for concurrent use.
type keptScreen struct {
	conn net.Conn
	wmu  sync.Mutex // one message written at a time

	mu   sync.Mutex // guards the following
	cond *sync.Cond // broadcast at every update read and when the connection ends
	// width, height and pix are the screen: 32-bit pixels in memory order
	// blue, green, red, unused (QEMU's own layout, which it copies as is).
	width, height int
	pix           []byte
	// gen counts the updates that changed pix; updates counts all.
	gen, updates uint64
	// png holds the compressed strips and which ones changed since the
	// last PNG.
	png  display.PNGStrips
	rgba *stdimage.RGBA // scratch for other encodings
	// pending: the screen was resized and the whole new screen has not
	// come yet.
	pending bool
	// err is why the connection ended, nil while it runs; failedAt when.
	err      error
	failedAt time.Time
	// lastLook is the last screenshot or input; nudgedSince when the
	// nudger started, zero when it does not run; synced says a refresh
	// was awaited since then.
	lastLook, nudgedSince time.Time
	synced                bool
	idle                  *time.Timer
	stop                  func() bool // unhooks the backend's context

	done chan struct{} // closed when the reader ends
}

// failedKept is a kept screen that could not be made: screenshots use
// screendump until keptRetry has passed.
func failedKept(err error) *keptScreen {
	k := &keptScreen{err: err, failedAt: time.Now(), done: make(chan struct{})}
	k.cond = sync.NewCond(&k.mu)
	close(k.done)
	return k
}

// dialKept connects to the VNC server on the unix socket path and waits
// for the first full frame.
func dialKept(ctx context.Context, path string) (*keptScreen, error) {
	ctx, cancel := context.WithTimeout(ctx, keptFirstFrame)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	k := &keptScreen{conn: conn, done: make(chan struct{})}
	k.cond = sync.NewCond(&k.mu)
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	br := bufio.NewReaderSize(conn, 256<<10)
	if err := k.handshake(br); err != nil {
		conn.Close()
		return nil, fmt.Errorf("vnc handshake: %w", err)
	}
	conn.SetDeadline(time.Time{})
	k.idle = time.AfterFunc(keptIdle, k.idleCheck)
	go k.read(br)
	// The first full frame comes at the next refresh, which the nudge
	// brings forward.
	if err := k.send(k.updateRequest(false, k.width, k.height)); err != nil {
		k.close()
		return nil, err
	}
	k.look()
	if err := k.waitUpdate(ctx, 0); err != nil {
		k.close()
		return nil, fmt.Errorf("vnc first frame: %w", err)
	}
	k.mu.Lock()
	k.synced = true
	k.mu.Unlock()
	return k, nil
}

// handshake runs RFB 3.8 with no security, shares the display with other
// clients (the gateway's viewers), and asks for QEMU's own pixel layout
// and the raw and DesktopSize encodings.
func (k *keptScreen) handshake(br *bufio.Reader) error {
	var version [12]byte
	if _, err := io.ReadFull(br, version[:]); err != nil {
		return err
	}
	if string(version[:4]) != "RFB " {
		return fmt.Errorf("not an RFB server: %q", version[:])
	}
	if _, err := k.conn.Write([]byte("RFB 003.008\n")); err != nil {
		return err
	}
	n, err := br.ReadByte()
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("the server refused the connection")
	}
	types := make([]byte, n)
	if _, err := io.ReadFull(br, types); err != nil {
		return err
	}
	if bytes.IndexByte(types, 1) < 0 {
		return fmt.Errorf("security types %v do not include None", types)
	}
	if _, err := k.conn.Write([]byte{1}); err != nil {
		return err
	}
	var result [4]byte
	if _, err := io.ReadFull(br, result[:]); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(result[:]) != 0 {
		return errors.New("security handshake failed")
	}
	if _, err := k.conn.Write([]byte{1}); err != nil { // ClientInit: shared
		return err
	}
	var init [24]byte
	if _, err := io.ReadFull(br, init[:]); err != nil {
		return err
	}
	if _, err := br.Discard(int(binary.BigEndian.Uint32(init[20:24]))); err != nil { // the name
		return err
	}
	k.resize(int(binary.BigEndian.Uint16(init[0:2])), int(binary.BigEndian.Uint16(init[2:4])))
	// 32 bits a pixel, depth 24, little endian, true colour, red at bit
	// 16, green 8, blue 0.
	pf := []byte{rfbSetPixelFormat, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0}
	enc := []byte{rfbSetEncodings, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0}
	desktopSize := int32(rfbEncodingDesktopSize)
	binary.BigEndian.PutUint32(enc[8:], uint32(desktopSize))
	_, err = k.conn.Write(append(pf, enc...))
	return err
}

// resize makes the copy width×height, black, every row damaged. k.mu is
// held or the reader does not run yet.
func (k *keptScreen) resize(w, h int) {
	k.width, k.height = w, h
	n := 4 * w * h
	if cap(k.pix) >= n {
		k.pix = k.pix[:n]
		clear(k.pix)
	} else {
		k.pix = make([]byte, n)
	}
	k.png.Damage(0, h)
	k.gen++
	k.pending = true
}

// updateRequest is a FramebufferUpdateRequest for the whole screen.
func (k *keptScreen) updateRequest(incremental bool, w, h int) []byte {
	m := []byte{rfbUpdateRequest, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if incremental {
		m[1] = 1
	}
	binary.BigEndian.PutUint16(m[6:], uint16(w))
	binary.BigEndian.PutUint16(m[8:], uint16(h))
	return m
}

// nudge is a KeyEvent releasing nudgeKeysym.
func nudge() []byte {
	m := []byte{rfbKeyEvent, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(m[4:], nudgeKeysym)
	return m
}

// send writes messages in one write.
func (k *keptScreen) send(msgs ...[]byte) error {
	if k.conn == nil {
		return k.err
	}
	var b []byte
	for _, m := range msgs {
		b = append(b, m...)
	}
	k.wmu.Lock()
	defer k.wmu.Unlock()
	// A server that stops reading must not hold up a screenshot.
	k.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := k.conn.Write(b)
	return err
}

// rect is one raw rectangle of an update, its pixels in data.
type rect struct {
	x, y, w, h int
	off        int // of its pixels in the update's data
}

// read applies the server's updates until the connection ends.
func (k *keptScreen) read(br *bufio.Reader) {
	defer close(k.done)
	var data []byte
	var rects []rect
	err := func() error {
		for {
			t, err := br.ReadByte()
			if err != nil {
				return err
			}
			switch t {
			case rfbFramebufferUpdate:
				var hdr [3]byte
				if _, err := io.ReadFull(br, hdr[:]); err != nil {
					return err
				}
				n := int(binary.BigEndian.Uint16(hdr[1:3]))
				rects, data = rects[:0], data[:0]
				resize := [2]int{-1, -1}
				for i := 0; i < n; i++ {
					var rh [12]byte
					if _, err := io.ReadFull(br, rh[:]); err != nil {
						return err
					}
					r := rect{
						x: int(binary.BigEndian.Uint16(rh[0:2])), y: int(binary.BigEndian.Uint16(rh[2:4])),
						w: int(binary.BigEndian.Uint16(rh[4:6])), h: int(binary.BigEndian.Uint16(rh[6:8])),
						off: len(data),
					}
					switch enc := int32(binary.BigEndian.Uint32(rh[8:12])); enc {
					case rfbEncodingRaw:
						size := 4 * r.w * r.h
						data = slices.Grow(data, size)[:r.off+size]
						if _, err := io.ReadFull(br, data[r.off:]); err != nil {
							return err
						}
						rects = append(rects, r)
					case rfbEncodingDesktopSize:
						resize = [2]int{r.w, r.h}
						rects = rects[:0] // what came before is of the old size
					default:
						return fmt.Errorf("rectangle %d has encoding %d, not asked for", i, enc)
					}
				}
				k.mu.Lock()
				if resize[0] >= 0 {
					k.resize(resize[0], resize[1])
				}
				w, h := k.width, k.height
				k.mu.Unlock()
				// The next request goes out before this update is applied,
				// so one is always outstanding; after a resize it asks for
				// the whole new screen.
				if err := k.send(k.updateRequest(resize[0] < 0, w, h)); err != nil {
					return err
				}
				k.mu.Lock()
				k.apply(rects, data)
				k.pending = k.pending && len(rects) == 0
				k.updates++
				k.cond.Broadcast()
				k.mu.Unlock()
			case rfbSetColourMap:
				var h [5]byte
				if _, err := io.ReadFull(br, h[:]); err != nil {
					return err
				}
				if _, err := br.Discard(6 * int(binary.BigEndian.Uint16(h[3:5]))); err != nil {
					return err
				}
			case rfbBell:
			case rfbServerCutText:
				var h [7]byte
				if _, err := io.ReadFull(br, h[:]); err != nil {
					return err
				}
				if _, err := br.Discard(int(binary.BigEndian.Uint32(h[3:7]) & 0x7fffffff)); err != nil {
					return err
				}
			default:
				return fmt.Errorf("unexpected server message type %d", t)
			}
		}
	}()
	k.fail(err)
}

// apply copies raw rectangles into the copy, clipped to it, and damages
// the rows whose pixels changed. k.mu is held.
func (k *keptScreen) apply(rects []rect, data []byte) {
	changed := false
	for _, r := range rects {
		x0, x1 := min(r.x, k.width), min(r.x+r.w, k.width)
		y0, y1 := min(r.y, k.height), min(r.y+r.h, k.height)
		if x0 >= x1 {
			continue
		}
		for y := y0; y < y1; y++ {
			src := data[r.off+4*r.w*(y-r.y)+4*(x0-r.x):][:4*(x1-x0)]
			dst := k.pix[4*(k.width*y+x0):][:4*(x1-x0)]
			if !bytes.Equal(src, dst) {
				copy(dst, src)
				k.png.Damage(y, y+1)
				changed = true
			}
		}
	}
	if changed {
		k.gen++
	}
}

// fail records why the connection ended and wakes the waiters.
func (k *keptScreen) fail(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err == nil {
		k.err, k.failedAt = err, time.Now()
	}
	if k.idle != nil {
		k.idle.Stop()
	}
	if k.stop != nil {
		k.stop()
	}
	k.conn.Close()
	k.cond.Broadcast()
}

// close ends the connection and waits for the reader. It may be called on
// a nil, failed or closed kept screen, and concurrently with anything.
func (k *keptScreen) close() {
	if k == nil || k.conn == nil {
		return
	}
	k.fail(net.ErrClosed)
	<-k.done
}

// usable says whether screenshots can come from k; retry whether a new
// one should be made.
func (k *keptScreen) state() (usable, retry bool) {
	if k == nil {
		return false, true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err == nil {
		return true, false
	}
	return false, k.err == errKeptIdle || time.Since(k.failedAt) >= keptRetry
}

// hook closes k when ctx ends.
func (k *keptScreen) hook(ctx context.Context) {
	stop := context.AfterFunc(ctx, k.close)
	k.mu.Lock()
	k.stop = stop
	if k.err != nil {
		stop()
	}
	k.mu.Unlock()
}

// generation counts the changes to the copy.
func (k *keptScreen) generation() uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.gen
}

// waitUpdate waits until more than after updates have been read.
func (k *keptScreen) waitUpdate(ctx context.Context, after uint64) error {
	stop := context.AfterFunc(ctx, func() {
		k.mu.Lock()
		k.cond.Broadcast()
		k.mu.Unlock()
	})
	defer stop()
	k.mu.Lock()
	defer k.mu.Unlock()
	for k.updates <= after && k.err == nil && ctx.Err() == nil {
		k.cond.Wait()
	}
	if k.updates > after {
		return nil
	}
	if k.err != nil {
		return k.err
	}
	return ctx.Err()
}

// look records that someone looks at the screen (a screenshot or an
// input), nudges QEMU's refresh, and keeps nudging for lookWindow. It
// reports whether the refresh may not have been held at its fastest for
// the last nudgeSettled: the copy may then be as old as QEMU's backed-off
// refresh interval.
func (k *keptScreen) look() (stale bool) {
	if k == nil {
		return false
	}
	k.mu.Lock()
	if k.err != nil {
		k.mu.Unlock()
		return false
	}
	now := time.Now()
	k.lastLook = now
	start := k.nudgedSince.IsZero()
	if start {
		k.nudgedSince, k.synced = now, false
	}
	stale = (!k.synced && now.Sub(k.nudgedSince) < nudgeSettled) || k.pending
	k.mu.Unlock()
	k.send(nudge())
	if start {
		go k.nudger()
	}
	return stale
}

// nudger nudges every nudgeEvery until lookWindow has passed without a
// look.
func (k *keptScreen) nudger() {
	t := time.NewTicker(nudgeEvery)
	defer t.Stop()
	for {
		select {
		case <-k.done:
			return
		case <-t.C:
		}
		k.mu.Lock()
		if time.Since(k.lastLook) >= lookWindow {
			k.nudgedSince = time.Time{}
			k.mu.Unlock()
			return
		}
		k.mu.Unlock()
		k.send(nudge())
	}
}

// idleCheck closes the connection when no one looked for keptIdle.
func (k *keptScreen) idleCheck() {
	k.mu.Lock()
	left := keptIdle - time.Since(k.lastLook)
	if left > 0 {
		if k.err == nil {
			k.idle.Reset(left)
		}
		k.mu.Unlock()
		return
	}
	k.mu.Unlock()
	k.fail(errKeptIdle)
}

// fresh makes sure the copy is no older than the call: after a quiet spell
// QEMU's refresh may have backed off to seconds, so a forced update of one
// pixel is asked for and awaited (whatever it carries besides, it comes
// from a refresh after this request).
func (k *keptScreen) fresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, keptFirstFrame)
	defer cancel()
	k.mu.Lock()
	after := k.updates
	k.mu.Unlock()
	if err := k.send(k.updateRequest(false, 1, 1), nudge()); err != nil {
		return err
	}
	if err := k.waitUpdate(ctx, after); err != nil {
		return err
	}
	k.mu.Lock()
	k.synced = !k.nudgedSince.IsZero()
	k.mu.Unlock()
	return nil
}

// encode encodes the copy as opts say, and returns the generation it
// shows. A full-size PNG compresses only the strips that changed since the
// last one; other formats and sizes go through an RGBA copy.
func (k *keptScreen) encode(enc *display.Encoder, opts display.EncodeOptions) ([]byte, uint64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return nil, 0, k.err
	}
	if k.width == 0 || k.height == 0 {
		return nil, 0, errors.New("the screen has no size")
	}
	var buf bytes.Buffer
	if (opts.Format == display.PNG || opts.Format == "") && opts.Width == 0 && opts.Height == 0 && opts.Factor == 0 && opts.Quality == 0 {
		w, pix := k.width, k.pix
		err := k.png.Encode(&buf, k.width, k.height, func(y int, dst []byte) {
			bgrxToRGB(dst, pix[4*w*y:4*w*(y+1)])
		})
		return buf.Bytes(), k.gen, err
	}
	if k.rgba == nil || k.rgba.Rect.Dx() != k.width || k.rgba.Rect.Dy() != k.height {
		k.rgba = stdimage.NewRGBA(stdimage.Rect(0, 0, k.width, k.height))
	}
	bgrxToRGBA(k.rgba.Pix, k.pix)
	if err := enc.Encode(&buf, k.rgba, opts); err != nil {
		return nil, 0, invalidOptions{err}
	}
	return buf.Bytes(), k.gen, nil
}

// invalidOptions is an encoding error that comes from the options, not
// the screen.
type invalidOptions struct{ error }

func (e invalidOptions) Unwrap() error { return e.error }

// bgrxToRGB converts a row of blue, green, red, unused pixels to red,
// green, blue.
func bgrxToRGB(dst, src []byte) {
	n := len(src) / 4
	dst = dst[:3*n]
	for i := 0; i < n; i++ {
		s := src[4*i : 4*i+3 : 4*i+3]
		d := dst[3*i : 3*i+3 : 3*i+3]
		d[0], d[1], d[2] = s[2], s[1], s[0]
	}
}

// bgrxToRGBA converts blue, green, red, unused pixels to opaque RGBA.
func bgrxToRGBA(dst, src []byte) {
	for i := 0; i+4 <= len(src); i += 4 {
		s := src[i : i+4 : i+4]
		d := dst[i : i+4 : i+4]
		d[0], d[1], d[2], d[3] = s[2], s[1], s[0], 0xff
	}
}
