package gateway

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// Viewer is a minimal RFB client (3.8, security None, raw encoding, 32
// bits per pixel): enough to check and measure a display through the
// gateway or directly, as hvkube bench display does. It is not a VNC
// viewer for people; noVNC is.
type Viewer struct {
	rw            io.ReadWriter
	r             *bufio.Reader
	Width, Height int
	Name          string
	buf           []byte
}

// NewViewer runs the RFB handshake over rw and asks for raw 32-bit pixels.
func NewViewer(rw io.ReadWriter) (*Viewer, error) {
	v := &Viewer{rw: rw, r: bufio.NewReaderSize(rw, 256<<10), buf: make([]byte, 256<<10)}
	var version [12]byte
	if _, err := io.ReadFull(v.r, version[:]); err != nil {
		return nil, fmt.Errorf("read ProtocolVersion: %w", err)
	}
	if string(version[:4]) != "RFB " {
		return nil, fmt.Errorf("not an RFB server: %q", version[:])
	}
	if _, err := rw.Write([]byte("RFB 003.008\n")); err != nil {
		return nil, err
	}
	n, err := v.r.ReadByte()
	if err != nil {
		return nil, fmt.Errorf("read security types: %w", err)
	}
	if n == 0 {
		return nil, fmt.Errorf("the server refused the connection: %s", v.reason())
	}
	types := make([]byte, n)
	if _, err := io.ReadFull(v.r, types); err != nil {
		return nil, err
	}
	none := false
	for _, t := range types {
		none = none || t == securityNone
	}
	if !none {
		return nil, fmt.Errorf("the server offers security types %v, not None", types)
	}
	if _, err := rw.Write([]byte{securityNone}); err != nil {
		return nil, err
	}
	var result [4]byte
	if _, err := io.ReadFull(v.r, result[:]); err != nil {
		return nil, fmt.Errorf("read SecurityResult: %w", err)
	}
	if binary.BigEndian.Uint32(result[:]) != 0 {
		return nil, fmt.Errorf("security failed: %s", v.reason())
	}
	if _, err := rw.Write([]byte{1}); err != nil { // ClientInit, shared
		return nil, err
	}
	var init [24]byte
	if _, err := io.ReadFull(v.r, init[:]); err != nil {
		return nil, fmt.Errorf("read ServerInit: %w", err)
	}
	v.Width, v.Height = int(binary.BigEndian.Uint16(init[0:2])), int(binary.BigEndian.Uint16(init[2:4]))
	name := make([]byte, min(binary.BigEndian.Uint32(init[20:24]), 4096))
	if _, err := io.ReadFull(v.r, name); err != nil {
		return nil, err
	}
	v.Name = string(name)
	// SetPixelFormat: 32 bpp, depth 24, little endian, true colour.
	pf := []byte{msgSetPixelFormat, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0}
	// SetEncodings: raw only.
	enc := []byte{msgSetEncodings, 0, 0, 1, 0, 0, 0, 0}
	if _, err := rw.Write(append(pf, enc...)); err != nil {
		return nil, err
	}
	return v, nil
}

func (v *Viewer) reason() string {
	var n [4]byte
	if _, err := io.ReadFull(v.r, n[:]); err != nil {
		return "no reason given"
	}
	b := make([]byte, min(binary.BigEndian.Uint32(n[:]), 4096))
	io.ReadFull(v.r, b)
	return string(b)
}

// RequestUpdate asks for the whole screen; incremental asks only for what
// changed.
func (v *Viewer) RequestUpdate(incremental bool) error {
	m := []byte{msgFramebufferUpdateReq, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if incremental {
		m[1] = 1
	}
	binary.BigEndian.PutUint16(m[6:], uint16(v.Width))
	binary.BigEndian.PutUint16(m[8:], uint16(v.Height))
	_, err := v.rw.Write(m)
	return err
}

// Update is a FramebufferUpdate as read.
type Update struct {
	Rects int
	// Pixels is the area its rectangles cover; Bytes the pixel data read.
	Pixels, Bytes int64
}

// ReadUpdate reads server messages until a FramebufferUpdate and reads it
// whole; bells, cut text and colour maps before it are skipped.
func (v *Viewer) ReadUpdate() (Update, error) {
	for {
		t, err := v.r.ReadByte()
		if err != nil {
			return Update{}, err
		}
		switch t {
		case 0: // FramebufferUpdate
			var h [3]byte
			if _, err := io.ReadFull(v.r, h[:]); err != nil {
				return Update{}, err
			}
			u := Update{Rects: int(binary.BigEndian.Uint16(h[1:3]))}
			for i := 0; i < u.Rects; i++ {
				var rh [12]byte
				if _, err := io.ReadFull(v.r, rh[:]); err != nil {
					return u, err
				}
				w, hh := int64(binary.BigEndian.Uint16(rh[4:6])), int64(binary.BigEndian.Uint16(rh[6:8]))
				if enc := int32(binary.BigEndian.Uint32(rh[8:12])); enc != 0 {
					return u, fmt.Errorf("rectangle %d has encoding %d, not raw", i, enc)
				}
				n := w * hh * 4
				if _, err := io.CopyBuffer(io.Discard, io.LimitReader(v.r, n), v.buf); err != nil {
					return u, err
				}
				u.Pixels += w * hh
				u.Bytes += n
			}
			return u, nil
		case 1: // SetColourMapEntries
			var h [5]byte
			if _, err := io.ReadFull(v.r, h[:]); err != nil {
				return Update{}, err
			}
			if _, err := io.CopyN(io.Discard, v.r, 6*int64(binary.BigEndian.Uint16(h[3:5]))); err != nil {
				return Update{}, err
			}
		case 2: // Bell
		case 3: // ServerCutText
			var h [7]byte
			if _, err := io.ReadFull(v.r, h[:]); err != nil {
				return Update{}, err
			}
			n := int64(int32(binary.BigEndian.Uint32(h[3:7])))
			if n < 0 {
				n = -n
			}
			if _, err := io.CopyN(io.Discard, v.r, n); err != nil {
				return Update{}, err
			}
		default:
			return Update{}, fmt.Errorf("unexpected server message type %d", t)
		}
	}
}

// Pointer moves the pointer to x, y with buttons (bit 0 left) pressed.
func (v *Viewer) Pointer(x, y int, buttons byte) error {
	m := []byte{msgPointerEvent, buttons, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(m[2:], uint16(x))
	binary.BigEndian.PutUint16(m[4:], uint16(y))
	_, err := v.rw.Write(m)
	return err
}
