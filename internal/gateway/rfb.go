package gateway

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The client side of the RFB protocol (RFC 6143), as far as the gateway
// must read it to tell a viewer's input from the rest: the handshake, then
// a stream of messages, each starting with its type byte. The server side
// is copied as it comes and never parsed.

// Bounds on client messages.
const (
	// MaxCutText bounds the text of a ClientCutText message.
	MaxCutText = 1 << 20
	// MaxEncodings bounds the list of a SetEncodings message.
	MaxEncodings = 1024
	// maxFence bounds a ClientFence payload (RFB says at most 64 bytes).
	maxFence = 64
)

// Client message types.
const (
	msgSetPixelFormat       = 0
	msgSetEncodings         = 2
	msgFramebufferUpdateReq = 3
	msgKeyEvent             = 4
	msgPointerEvent         = 5
	msgClientCutText        = 6
	msgEnableContinuous     = 150
	msgClientFence          = 248
	msgSetDesktopSize       = 251
	msgXVP                  = 252
	msgQEMU                 = 255
)

// ClientMessage is one message a viewer sent.
type ClientMessage struct {
	Type byte
	// Name is the message's name in RFC 6143 (or QEMU's extension).
	Name string
	// Input marks what acts on the desktop (keys, pointer, clipboard,
	// desktop size, power): it passes only for the viewer holding control.
	Input bool
	// Raw is the whole message, type byte included. It is only valid
	// until the next read.
	Raw []byte
}

// ErrUnknownMessage is a client message type the gateway cannot size, so
// it cannot read past it: the connection must end.
var ErrUnknownMessage = errors.New("unknown RFB client message")

// ErrTooLarge is a message over the gateway's bounds.
var ErrTooLarge = errors.New("RFB client message too large")

// ErrHandshake is a client handshake the gateway does not accept.
var ErrHandshake = errors.New("RFB handshake refused")

// securityNone is the only security type the gateway passes: the VNC
// server is the sandbox's own socket, and the gateway has checked the
// viewer already.
const securityNone = 1

// Handshake reads the client's half of the RFB handshake from r and writes
// each part to w as soon as it is read (the server answers each part
// before the client sends the next): ProtocolVersion, the security type
// chosen (RFB 3.7 and later; it must be None), and ClientInit, whose
// shared flag is forced on so that no viewer disconnects the others.
func Handshake(r io.Reader, w io.Writer) (version string, err error) {
	var v [12]byte
	if _, err := io.ReadFull(r, v[:]); err != nil {
		return "", fmt.Errorf("read ProtocolVersion: %w", err)
	}
	var major, minor int
	if n, err := fmt.Sscanf(string(v[:]), "RFB %03d.%03d\n", &major, &minor); n != 2 || err != nil || major != 3 || v[11] != '\n' {
		return "", fmt.Errorf("%w: ProtocolVersion %q", ErrHandshake, v[:])
	}
	version = fmt.Sprintf("%d.%d", major, minor)
	if _, err := w.Write(v[:]); err != nil {
		return version, err
	}
	if minor >= 7 {
		var sec [1]byte
		if _, err := io.ReadFull(r, sec[:]); err != nil {
			return version, fmt.Errorf("read security type: %w", err)
		}
		if sec[0] != securityNone {
			return version, fmt.Errorf("%w: security type %d (only None, 1, passes the gateway)", ErrHandshake, sec[0])
		}
		if _, err := w.Write(sec[:]); err != nil {
			return version, err
		}
	}
	var init [1]byte
	if _, err := io.ReadFull(r, init[:]); err != nil {
		return version, fmt.Errorf("read ClientInit: %w", err)
	}
	init[0] = 1
	_, err = w.Write(init[:])
	return version, err
}

// MessageReader reads client messages, bounded, from a stream.
type MessageReader struct {
	r   io.Reader
	buf []byte
}

// NewMessageReader reads messages from r (buffer it: messages are read a
// header at a time).
func NewMessageReader(r io.Reader) *MessageReader {
	return &MessageReader{r: r, buf: make([]byte, 0, 256)}
}

// fill makes the buffer hold the first n bytes of the message.
func (m *MessageReader) fill(n int) error {
	have := len(m.buf)
	if n <= have {
		return nil
	}
	if cap(m.buf) < n {
		nb := make([]byte, have, n)
		copy(nb, m.buf)
		m.buf = nb
	}
	m.buf = m.buf[:n]
	if _, err := io.ReadFull(m.r, m.buf[have:n]); err != nil {
		if errors.Is(err, io.EOF) && have > 0 {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// Next reads the next message. At a clean end of stream between messages
// it returns io.EOF; a message cut short is io.ErrUnexpectedEOF; a type
// it does not know is ErrUnknownMessage, one over the bounds ErrTooLarge.
// After an error the stream cannot be read further.
func (m *MessageReader) Next() (ClientMessage, error) {
	// Give back a buffer a large cut text grew.
	if cap(m.buf) > 64<<10 {
		m.buf = make([]byte, 0, 256)
	}
	m.buf = m.buf[:0]
	if err := m.fill(1); err != nil {
		return ClientMessage{}, err
	}
	msg := ClientMessage{Type: m.buf[0]}
	size := 0
	switch msg.Type {
	case msgSetPixelFormat:
		msg.Name, size = "SetPixelFormat", 20
	case msgSetEncodings:
		msg.Name = "SetEncodings"
		if err := m.fill(4); err != nil {
			return msg, err
		}
		n := int(binary.BigEndian.Uint16(m.buf[2:4]))
		if n > MaxEncodings {
			return msg, fmt.Errorf("%w: SetEncodings with %d encodings (at most %d)", ErrTooLarge, n, MaxEncodings)
		}
		size = 4 + 4*n
	case msgFramebufferUpdateReq:
		msg.Name, size = "FramebufferUpdateRequest", 10
	case msgKeyEvent:
		msg.Name, size, msg.Input = "KeyEvent", 8, true
	case msgPointerEvent:
		msg.Name, size, msg.Input = "PointerEvent", 6, true
	case msgClientCutText:
		msg.Name, msg.Input = "ClientCutText", true
		if err := m.fill(8); err != nil {
			return msg, err
		}
		// A negative length is the extended clipboard's form: the
		// payload is -length bytes.
		n := int64(int32(binary.BigEndian.Uint32(m.buf[4:8])))
		if n < 0 {
			n = -n
		}
		if n > MaxCutText {
			return msg, fmt.Errorf("%w: ClientCutText of %d bytes (at most %d)", ErrTooLarge, n, MaxCutText)
		}
		size = 8 + int(n)
	case msgEnableContinuous:
		msg.Name, size = "EnableContinuousUpdates", 10
	case msgClientFence:
		msg.Name = "ClientFence"
		if err := m.fill(9); err != nil {
			return msg, err
		}
		n := int(m.buf[8])
		if n > maxFence {
			return msg, fmt.Errorf("%w: ClientFence payload of %d bytes (at most %d)", ErrTooLarge, n, maxFence)
		}
		size = 9 + n
	case msgSetDesktopSize:
		msg.Name, msg.Input = "SetDesktopSize", true
		if err := m.fill(8); err != nil {
			return msg, err
		}
		size = 8 + 16*int(m.buf[6])
	case msgXVP:
		msg.Name, size, msg.Input = "xvp", 4, true
	case msgQEMU:
		if err := m.fill(2); err != nil {
			return msg, err
		}
		switch m.buf[1] {
		case 0:
			msg.Name, size, msg.Input = "QEMUExtendedKeyEvent", 12, true
		case 1:
			msg.Name = "QEMUAudio"
			if err := m.fill(4); err != nil {
				return msg, err
			}
			switch binary.BigEndian.Uint16(m.buf[2:4]) {
			case 0, 1: // enable, disable
				size = 4
			case 2: // set format
				size = 10
			default:
				return msg, fmt.Errorf("%w: QEMU audio operation %d", ErrUnknownMessage, binary.BigEndian.Uint16(m.buf[2:4]))
			}
		default:
			return msg, fmt.Errorf("%w: QEMU client message subtype %d", ErrUnknownMessage, m.buf[1])
		}
	default:
		return msg, fmt.Errorf("%w: type %d", ErrUnknownMessage, msg.Type)
	}
	if err := m.fill(size); err != nil {
		return msg, err
	}
	msg.Raw = m.buf[:size]
	return msg, nil
}

// String describes a message for logs.
func (c ClientMessage) String() string {
	return fmt.Sprintf("%s (type %d, %d bytes)", c.Name, c.Type, len(c.Raw))
}
