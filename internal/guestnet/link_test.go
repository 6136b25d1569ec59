package guestnet

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// frames builds a stream of the given frames in QEMU's framing, by hand.
func frames(fs ...[]byte) []byte {
	var b []byte
	for _, f := range fs {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

func TestReadFrame(t *testing.T) {
	big := bytes.Repeat([]byte{0xab}, MaxFrameSize)
	in := frames([]byte("first frame...."), nil, big, []byte("last"))
	r := bufio.NewReader(bytes.NewReader(in))
	buf := make([]byte, MaxFrameSize)
	for i, want := range [][]byte{[]byte("first frame...."), {}, big, []byte("last")} {
		got, err := readFrame(r, buf)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("frame %d = %d bytes, %v; want %d bytes", i, len(got), err, len(want))
		}
	}
	if _, err := readFrame(r, buf); err != io.EOF {
		t.Errorf("at the end: %v, want io.EOF", err)
	}

	cut := frames([]byte("truncated frame"))
	_, err := readFrame(bufio.NewReader(bytes.NewReader(cut[:10])), buf)
	if err != io.ErrUnexpectedEOF {
		t.Errorf("cut frame: %v, want io.ErrUnexpectedEOF", err)
	}
	_, err = readFrame(bufio.NewReader(bytes.NewReader(cut[:2])), buf)
	if err != io.ErrUnexpectedEOF {
		t.Errorf("cut length: %v, want io.ErrUnexpectedEOF", err)
	}
	tooBig := binary.BigEndian.AppendUint32(nil, MaxFrameSize+1)
	if _, err := readFrame(bufio.NewReader(bytes.NewReader(tooBig)), buf); !errors.Is(err, errFrameTooLarge) {
		t.Errorf("oversized: %v, want errFrameTooLarge", err)
	}
}

func TestAppendFrame(t *testing.T) {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{
		ReserveHeaderBytes: 14,
		Payload:            buffer.MakeWithData([]byte("payload")),
	})
	defer pkt.DecRef()
	copy(pkt.LinkHeader().Push(14), "ethernet-head!")
	got := appendFrame([]byte("x"), pkt)
	want := append([]byte("x"), frames([]byte("ethernet-head!payload"))...)
	if !bytes.Equal(got, want) {
		t.Errorf("appendFrame = %q, want %q", got, want)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(frames([]byte("a frame of some bytes"), nil, []byte{1}))
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2})
	f.Add(binary.BigEndian.AppendUint32(nil, MaxFrameSize))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		buf := make([]byte, MaxFrameSize)
		var again []byte // what was read, framed again
		for {
			fr, err := readFrame(r, buf)
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, errFrameTooLarge) {
					t.Fatalf("unexpected error %v", err)
				}
				break
			}
			if len(fr) > MaxFrameSize {
				t.Fatalf("frame of %d bytes", len(fr))
			}
			again = append(again, frames(fr)...)
		}
		// Whatever was read is a prefix of the input, unchanged.
		if !bytes.HasPrefix(in, again) {
			t.Fatalf("frames read do not reproduce the input")
		}
	})
}

func TestAdmitter(t *testing.T) {
	gwA, dnsA := netip.MustParseAddr("10.0.2.2"), netip.MustParseAddr("10.0.2.3")
	admit := admitter(netip.MustParseAddr("10.0.2.15"), gwA, dnsA)
	eth := func(typ tcpip.NetworkProtocolNumber, payload []byte) []byte {
		f := make([]byte, header.EthernetMinimumSize)
		header.Ethernet(f).Encode(&header.EthernetFields{Type: typ})
		return append(f, payload...)
	}
	arpFrame := func(op header.ARPOp, target string) []byte {
		a := header.ARP(make([]byte, header.ARPSize))
		a.SetIPv4OverEthernet()
		a.SetOp(op)
		t4 := netip.MustParseAddr(target).As4()
		copy(a.ProtocolAddressTarget(), t4[:])
		return eth(header.ARPProtocolNumber, a)
	}
	ipFrom := func(proto tcpip.TransportProtocolNumber, src, dst string) []byte {
		ip := header.IPv4(make([]byte, header.IPv4MinimumSize+8))
		ip.Encode(&header.IPv4Fields{
			TotalLength: uint16(len(ip)), Protocol: uint8(proto), TTL: 64,
			SrcAddr: tcpip.AddrFrom4(netip.MustParseAddr(src).As4()), DstAddr: tcpip.AddrFrom4(netip.MustParseAddr(dst).As4()),
		})
		return eth(header.IPv4ProtocolNumber, ip)
	}
	ipFrame := func(proto tcpip.TransportProtocolNumber, dst string) []byte {
		return ipFrom(proto, "10.0.2.15", dst)
	}
	tests := []struct {
		name  string
		frame []byte
		want  bool
	}{
		{"ARP for the gateway", arpFrame(header.ARPRequest, "10.0.2.2"), true},
		{"ARP for DNS", arpFrame(header.ARPRequest, "10.0.2.3"), true},
		{"ARP for the guest's own address", arpFrame(header.ARPRequest, "10.0.2.15"), false},
		{"ARP for another", arpFrame(header.ARPRequest, "10.0.2.99"), false},
		{"ARP reply", arpFrame(header.ARPReply, "10.0.2.2"), true},
		{"ARP truncated", eth(header.ARPProtocolNumber, []byte{0, 1}), false},
		{"TCP anywhere", ipFrame(header.TCPProtocolNumber, "93.184.216.34"), true},
		{"UDP anywhere", ipFrame(header.UDPProtocolNumber, "93.184.216.34"), true},
		{"TCP from another source", ipFrom(header.TCPProtocolNumber, "10.0.2.16", "93.184.216.34"), false},
		{"ping the gateway", ipFrame(header.ICMPv4ProtocolNumber, "10.0.2.2"), true},
		{"ping elsewhere", ipFrame(header.ICMPv4ProtocolNumber, "8.8.8.8"), false},
		{"IPv4 truncated", eth(header.IPv4ProtocolNumber, []byte{0x45, 0}), false},
		{"IPv6", eth(header.IPv6ProtocolNumber, make([]byte, 40)), false},
	}
	for _, tt := range tests {
		if got := admit(tt.frame); got != tt.want {
			t.Errorf("%s: admitted %v, want %v", tt.name, got, tt.want)
		}
	}
}
