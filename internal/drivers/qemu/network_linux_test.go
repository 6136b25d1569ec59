//go:build linux

package qemu

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/guestnet"
)

// standInQEMU is a process that passes for a QEMU named name (its command
// line has -name NAME), and the proc that stands for it.
func standInQEMU(t *testing.T, name string) *proc {
	t.Helper()
	cmd := exec.Command("sh", "-c", "sleep 600", "-name", name)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	p := &proc{pid: cmd.Process.Pid, name: name, exited: exited}
	deadline := time.Now().Add(5 * time.Second)
	for !processAlive(p.pid, name) {
		if time.Now().After(deadline) {
			t.Fatal("the stand-in process does not show its -name")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return p
}

// TestLinkFollowsItsProcess drives a link against a stand-in for QEMU's
// stream server: it connects when started, with nothing let through and
// no names answered; the sandbox that takes it gives it its policy; it
// connects again when the server closes the stream; and it ends, its
// network closed, when the process ends.
func TestLinkFollowsItsProcess(t *testing.T) {
	ctx := context.Background()
	sock := filepath.Join(t.TempDir(), netSocketName)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	accept := func(what string) net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(10 * time.Second):
			t.Fatalf("the link did not connect %s", what)
			return nil
		}
	}
	p := standInQEMU(t, "hvkube-linktest:"+t.Name())
	b := &Backend{log: slog.New(slog.DiscardHandler), hostAddrs: []netip.Addr{}, resolver: net.DefaultResolver}
	l, err := b.startLink(ctx, p, sock, &imageNetwork{})
	if err != nil {
		t.Fatal(err)
	}
	p.link = l
	first := accept("at start")
	if got := ruleTexts(l.nw.Policy().Deny); len(got) != 2 || got[0] != "0.0.0.0/0" || len(l.nw.Policy().Allow) != 0 {
		t.Errorf("a new link's policy denies %q, allows %d; want everything denied", got, len(l.nw.Policy().Allow))
	}
	if _, err := l.dns.LookupNetIP(ctx, "ip4", "example.com."); !errors.Is(err, errNoDNS) {
		t.Errorf("a new link answers names: %v", err)
	}

	// A sandbox takes it.
	v := &vm{id: "a", p: p, denials: &denials{}, meta: vmMeta{Network: &api.Network{Mode: api.NetworkNAT, Egress: api.Egress{Allow: []string{"127.0.0.1:8080"}}}}}
	v.connectLink()
	if got := ruleTexts(l.nw.Policy().Allow); len(got) != 1 || got[0] != "127.0.0.1:8080" || len(l.nw.Policy().Deny) != 0 {
		t.Errorf("after the sandbox took it the policy allows %q, denies %d", got, len(l.nw.Policy().Deny))
	}
	if !l.dns.open.Load() || l.owner.Load() != v.denials {
		t.Error("after the sandbox took it, DNS is shut or the denials go elsewhere")
	}

	// QEMU closes the stream (as it does when it drops a client): the link
	// connects again.
	first.Close()
	second := accept("again after the stream closed")
	if got := l.nw.Stats().Attachments; got < 1 {
		t.Errorf("attachments %d", got)
	}

	// The process dies, and its sockets with it (the stand-in's are the
	// test's: closed here, so that a link that dials again before it sees
	// the process gone is refused, as it would be by a dead QEMU): the
	// link ends by itself, and its network with it.
	syscall.Kill(p.pid, syscall.SIGKILL)
	ln.Close()
	second.Close()
	select {
	case <-l.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the link did not end with its process")
	}
	if _, err := l.nw.DialGuest(ctx, 80); !errors.Is(err, guestnet.ErrClosed) {
		t.Errorf("the network after its process ended: %v, want closed", err)
	}
	l.close() // idempotent
}
