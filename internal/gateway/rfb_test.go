package gateway

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// msg builds a client message from its parts.
func msg(parts ...any) []byte {
	var b bytes.Buffer
	for _, p := range parts {
		binary.Write(&b, binary.BigEndian, p)
	}
	return b.Bytes()
}

func TestMessageReader(t *testing.T) {
	encodings := func(n int) []byte {
		b := msg(uint8(2), uint8(0), uint16(n))
		for i := 0; i < n; i++ {
			b = append(b, msg(int32(i))...)
		}
		return b
	}
	cut := func(n int32, payload int) []byte {
		return append(msg(uint8(6), [3]byte{}, n), bytes.Repeat([]byte("x"), payload)...)
	}
	for _, tt := range []struct {
		name  string
		in    []byte
		want  string // message name
		input bool
		size  int
		err   error
	}{
		{"SetPixelFormat", msg(uint8(0), [3]byte{}, [16]byte{}), "SetPixelFormat", false, 20, nil},
		{"SetEncodings", encodings(3), "SetEncodings", false, 16, nil},
		{"SetEncodings none", encodings(0), "SetEncodings", false, 4, nil},
		{"SetEncodings at the bound", encodings(MaxEncodings), "SetEncodings", false, 4 + 4*MaxEncodings, nil},
		{"SetEncodings over the bound", encodings(MaxEncodings + 1), "SetEncodings", false, 0, ErrTooLarge},
		{"FramebufferUpdateRequest", msg(uint8(3), uint8(0), uint16(0), uint16(0), uint16(1280), uint16(800)), "FramebufferUpdateRequest", false, 10, nil},
		{"KeyEvent", msg(uint8(4), uint8(1), uint16(0), uint32(0x61)), "KeyEvent", true, 8, nil},
		{"PointerEvent", msg(uint8(5), uint8(1), uint16(10), uint16(20)), "PointerEvent", true, 6, nil},
		{"ClientCutText", cut(5, 5), "ClientCutText", true, 13, nil},
		{"ClientCutText empty", cut(0, 0), "ClientCutText", true, 8, nil},
		{"ClientCutText at the bound", cut(MaxCutText, MaxCutText), "ClientCutText", true, 8 + MaxCutText, nil},
		{"ClientCutText over the bound", cut(MaxCutText+1, 0), "ClientCutText", true, 0, ErrTooLarge},
		{"ClientCutText extended", cut(-4, 4), "ClientCutText", true, 12, nil},
		{"ClientCutText extended over the bound", cut(-(MaxCutText + 1), 0), "ClientCutText", true, 0, ErrTooLarge},
		{"ClientCutText most negative", cut(-1<<31, 0), "ClientCutText", true, 0, ErrTooLarge},
		{"EnableContinuousUpdates", msg(uint8(150), uint8(1), uint16(0), uint16(0), uint16(1280), uint16(800)), "EnableContinuousUpdates", false, 10, nil},
		{"ClientFence", append(msg(uint8(248), [3]byte{}, uint32(0), uint8(3)), 1, 2, 3), "ClientFence", false, 12, nil},
		{"ClientFence over the bound", msg(uint8(248), [3]byte{}, uint32(0), uint8(65)), "ClientFence", false, 0, ErrTooLarge},
		{"SetDesktopSize", append(msg(uint8(251), uint8(0), uint16(1024), uint16(768), uint8(1), uint8(0)), make([]byte, 16)...), "SetDesktopSize", true, 24, nil},
		{"xvp", msg(uint8(252), uint8(0), uint8(1), uint8(2)), "xvp", true, 4, nil},
		{"QEMU extended key", msg(uint8(255), uint8(0), uint16(1), uint32(0x61), uint32(30)), "QEMUExtendedKeyEvent", true, 12, nil},
		{"QEMU audio enable", msg(uint8(255), uint8(1), uint16(0)), "QEMUAudio", false, 4, nil},
		{"QEMU audio format", msg(uint8(255), uint8(1), uint16(2), uint8(3), uint8(2), uint32(44100)), "QEMUAudio", false, 10, nil},
		{"QEMU audio unknown", msg(uint8(255), uint8(1), uint16(9)), "", false, 0, ErrUnknownMessage},
		{"QEMU unknown subtype", msg(uint8(255), uint8(7), uint16(0)), "", false, 0, ErrUnknownMessage},
		{"unknown type", msg(uint8(7), [7]byte{}), "", false, 0, ErrUnknownMessage},
		{"gii is not passed", msg(uint8(253), [7]byte{}), "", false, 0, ErrUnknownMessage},
		{"empty stream", nil, "", false, 0, io.EOF},
		{"truncated PointerEvent", msg(uint8(5), uint8(1), uint16(10)), "", false, 0, io.ErrUnexpectedEOF},
		{"truncated SetEncodings header", msg(uint8(2), uint8(0)), "", false, 0, io.ErrUnexpectedEOF},
		{"truncated SetEncodings list", encodings(3)[:10], "", false, 0, io.ErrUnexpectedEOF},
		{"truncated ClientCutText", cut(100, 50), "", false, 0, io.ErrUnexpectedEOF},
		{"truncated QEMU", msg(uint8(255)), "", false, 0, io.ErrUnexpectedEOF},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewMessageReader(bytes.NewReader(tt.in)).Next()
			if !errors.Is(err, tt.err) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if m.Name != tt.want || m.Input != tt.input || len(m.Raw) != tt.size || !bytes.Equal(m.Raw, tt.in[:tt.size]) {
				t.Fatalf("got %s input=%v, want %s input=%v size %d", m, m.Input, tt.want, tt.input, tt.size)
			}
		})
	}
}

// TestMessageStream reads messages back to back, as they come, split at
// every byte boundary.
func TestMessageStream(t *testing.T) {
	var in []byte
	in = append(in, msg(uint8(2), uint8(0), uint16(2), int32(0), int32(-223))...)
	in = append(in, msg(uint8(3), uint8(1), uint16(0), uint16(0), uint16(1280), uint16(800))...)
	in = append(in, msg(uint8(5), uint8(0), uint16(1), uint16(2))...)
	in = append(in, append(msg(uint8(6), [3]byte{}, int32(2)), 'h', 'i')...)
	in = append(in, msg(uint8(4), uint8(0), uint16(0), uint32(0xff0d))...)
	want := []string{"SetEncodings", "FramebufferUpdateRequest", "PointerEvent", "ClientCutText", "KeyEvent"}
	r := NewMessageReader(oneByte{bytes.NewReader(in)})
	var got []string
	var total int
	for {
		m, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Name)
		total += len(m.Raw)
	}
	if len(got) != len(want) || total != len(in) {
		t.Fatalf("got %v (%d bytes), want %v (%d bytes)", got, total, want, len(in))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

// oneByte reads one byte at a time.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}

func TestHandshake(t *testing.T) {
	for _, tt := range []struct {
		name    string
		in      string
		fwd     string
		version string
		err     error
	}{
		{"3.8 None", "RFB 003.008\n\x01\x00", "RFB 003.008\n\x01\x01", "3.8", nil},
		{"3.8 None shared", "RFB 003.008\n\x01\x01", "RFB 003.008\n\x01\x01", "3.8", nil},
		{"3.7 None", "RFB 003.007\n\x01\x00", "RFB 003.007\n\x01\x01", "3.7", nil},
		{"3.3", "RFB 003.003\n\x00", "RFB 003.003\n\x01", "3.3", nil},
		{"VNC authentication", "RFB 003.008\n\x02", "RFB 003.008\n", "3.8", ErrHandshake},
		{"VeNCrypt", "RFB 003.008\n\x13", "RFB 003.008\n", "3.8", ErrHandshake},
		{"not RFB", "GET / HTTP/1.1\r\n", "", "", ErrHandshake},
		{"RFB 4", "RFB 004.000\n\x01\x00", "", "", ErrHandshake},
		{"no newline", "RFB 003.008 \x01\x00", "", "", ErrHandshake},
		{"truncated version", "RFB 003", "", "", io.ErrUnexpectedEOF},
		{"no security type", "RFB 003.008\n", "RFB 003.008\n", "3.8", io.EOF},
		{"no ClientInit", "RFB 003.008\n\x01", "RFB 003.008\n\x01", "3.8", io.EOF},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var fwd bytes.Buffer
			v, err := Handshake(bytes.NewReader([]byte(tt.in)), &fwd)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			if v != tt.version || fwd.String() != tt.fwd {
				t.Fatalf("version %q forwarded %q, want %q %q", v, fwd.String(), tt.version, tt.fwd)
			}
		})
	}
}
