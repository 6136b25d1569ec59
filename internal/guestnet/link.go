package guestnet

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// The stream framing QEMU's -netdev stream (and -netdev socket) uses: a
// 4-byte big-endian length, then that many bytes of Ethernet frame.
const frameLenSize = 4

// errFrameTooLarge ends an attachment: after a length that cannot be a frame
// the stream is out of step and nothing after it can be trusted.
var errFrameTooLarge = errors.New("frame length over the limit")

// peerGone reports whether err says the peer closed or dropped the
// connection, between frames or in one: QEMU exited, or closed the stream.
func peerGone(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.ErrClosedPipe) {
		return true
	}
	for _, e := range peerGoneErrnos {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// readFrame reads one frame into buf (at least MaxFrameSize long) and returns
// it. A frame of length zero is returned empty.
func readFrame(r *bufio.Reader, buf []byte) ([]byte, error) {
	var hdr [frameLenSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrameSize {
		return nil, fmt.Errorf("%w: %d bytes", errFrameTooLarge, n)
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf[:n], nil
}

// appendFrame appends pkt, with its length, to b.
func appendFrame(b []byte, pkt *stack.PacketBuffer) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(pkt.Size()))
	for _, s := range pkt.AsSlices() {
		b = append(b, s...)
	}
	return b
}

// writeBatch bounds how many bytes of frames one write carries.
const writeBatch = 64 << 10

// pumpOut writes the frames queued on ep to w until ctx ends or a write
// fails. It blocks in Write as long as the peer does not read: QEMU stops
// reading while its guest is stopped, and the queue then fills and drops,
// which the guest's TCP recovers from. The write ends when the attachment
// closes the connection.
func pumpOut(ctx context.Context, ep *channel.Endpoint, w io.Writer, frames *atomic.Uint64) error {
	buf := make([]byte, 0, writeBatch+MaxFrameSize+frameLenSize)
	for {
		pkt := ep.ReadContext(ctx)
		if pkt == nil {
			return ctx.Err()
		}
		buf = appendFrame(buf[:0], pkt)
		pkt.DecRef()
		n := 1
		for len(buf) < writeBatch {
			pkt = ep.Read()
			if pkt == nil {
				break
			}
			buf = appendFrame(buf, pkt)
			pkt.DecRef()
			n++
		}
		if _, err := w.Write(buf); err != nil {
			return fmt.Errorf("write frames: %w", err)
		}
		frames.Add(uint64(n))
	}
}

// pumpIn reads frames from r and injects those admit accepts (all, if admit
// is nil) into ep, until r fails. It returns the read error (io.EOF when
// the peer closed between frames).
func pumpIn(r io.Reader, ep *channel.Endpoint, admit func([]byte) bool, frames, dropped *atomic.Uint64) error {
	br := bufio.NewReaderSize(r, 64<<10)
	buf := make([]byte, MaxFrameSize)
	for {
		frame, err := readFrame(br, buf)
		if err != nil {
			return err
		}
		if len(frame) < ethernetHeader || admit != nil && !admit(frame) {
			dropped.Add(1)
			continue
		}
		frames.Add(1)
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(frame)})
		ep.InjectInbound(0, pkt) // the Ethernet endpoint reads the type from the frame
		pkt.DecRef()
	}
}

// admitter returns the inbound filter of a Network whose own addresses are
// gateway and dns, and whose guest is guest: ARP requests only for those
// two (the NIC is promiscuous and would answer for any address, the
// guest's own included), ARP replies, and IPv4 from the guest's address,
// except ICMP to other addresses (which the stack would echo as if it were
// every host).
func admitter(guest, gateway, dns netip.Addr) func([]byte) bool {
	own := func(b []byte) bool {
		a, ok := netip.AddrFromSlice(b)
		return ok && (a == gateway || a == dns)
	}
	return func(frame []byte) bool {
		eth := header.Ethernet(frame)
		payload := frame[ethernetHeader:]
		switch eth.Type() {
		case header.ARPProtocolNumber:
			arp := header.ARP(payload)
			if !arp.IsValid() {
				return false
			}
			switch arp.Op() {
			case header.ARPRequest:
				return own(arp.ProtocolAddressTarget())
			case header.ARPReply:
				return true
			}
			return false
		case header.IPv4ProtocolNumber:
			ip := header.IPv4(payload)
			if !ip.IsValid(len(payload)) {
				return false
			}
			if src, ok := netip.AddrFromSlice(ip.SourceAddressSlice()); !ok || src != guest {
				return false
			}
			if ip.TransportProtocol() == header.ICMPv4ProtocolNumber {
				return own(ip.DestinationAddressSlice())
			}
			return true
		}
		return false
	}
}
