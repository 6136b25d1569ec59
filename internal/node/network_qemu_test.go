//go:build linux

package node

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qemutest"
)

// TestQEMUSandboxNetwork runs the node over the QEMU backend: a sandbox
// of a template built with a network starts with status.network saying
// nat and its address, reaches the host service its egress rules allow,
// and when its guest connects where it may not, the next look at it
// writes the denial into status.network and records one EgressDenied
// event (looking again at once records no other).
func TestQEMUSandboxNetwork(t *testing.T) {
	images := qemutest.RequireImage(t, "linux-desktop")
	ctx := context.Background()
	dir := t.TempDir()
	be, st, nd := qemuNode(t, qemu.Config{Dir: dir + "/qemu", ImageDir: images, NoSpares: true}, dir)
	tpl := getTemplate(t, st, "desk")
	if strings.Contains(tpl.Status.Message, "no network") {
		t.Skipf("the image declares no network: %s", tpl.Status.Message)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "allowed") }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	spec := fmt.Sprintf("  templateRef: desk\n  network: {egress: {allow: [\"127.0.0.1:%d\"]}}\n", port)
	if _, err := st.Create(ctx, yamlObj(t, sandboxYAML("netbox", spec))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Delete(context.Background(), "netbox") })
	reconcile := func() {
		t.Helper()
		if _, err := nd.reconcileSandbox(ctx, "netbox"); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}
	sandbox := func() *api.Sandbox {
		t.Helper()
		o, err := st.Get(ctx, api.KindSandbox, "netbox")
		if err != nil {
			t.Fatal(err)
		}
		return o.(*api.Sandbox)
	}
	reconcile()
	sb := sandbox()
	if sb.Status.Phase != api.SandboxRunning {
		t.Fatalf("sandbox %s: %s", sb.Status.Phase, sb.Status.Message)
	}
	if nw := sb.Status.Network; nw == nil || nw.Mode != api.NetworkNAT || nw.Address != "10.0.2.15" {
		t.Fatalf("status.network of the started sandbox: %+v, want nat at 10.0.2.15", nw)
	}
	fetch := func(port int) backend.ExecResult {
		t.Helper()
		script := `exec 3<>"/dev/tcp/10.0.2.2/$1" || exit 7; printf 'GET / HTTP/1.0\r\n\r\n' >&3; cat <&3`
		res, err := be.Exec(ctx, "netbox", backend.ExecRequest{Path: "timeout", Args: []string{"20", "bash", "-c", script, "fetch", strconv.Itoa(port)}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := fetch(port); res.ExitCode != 0 || !strings.HasSuffix(string(res.Stdout), "allowed") {
		t.Fatalf("fetch from the allowed host port: %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	// The node's own API port stands for what the guest may not reach.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	denied := ln.Addr().(*net.TCPAddr).Port
	if res := fetch(denied); res.ExitCode != 7 || !strings.Contains(string(res.Stderr), "Connection refused") {
		t.Fatalf("fetch from a port not allowed: %d %q %q, want refused", res.ExitCode, res.Stdout, res.Stderr)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := be.Inspect(ctx, "netbox")
		if err != nil {
			t.Fatal(err)
		}
		if info.Network != nil && info.Network.Denied > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backend reports no denial: %+v", info.Network)
		}
		time.Sleep(20 * time.Millisecond)
	}
	reconcile()
	nw := sandbox().Status.Network
	want := "127.0.0.1:" + strconv.Itoa(denied)
	if nw == nil || nw.DeniedConnections != 1 || nw.LastDenied == nil || nw.LastDenied.Destination != want || nw.LastDenied.Reason != "Blocked" {
		t.Fatalf("status.network after the refused connection: %+v, want 1 denial to %s (Blocked)", nw, want)
	}
	reconcile()
	evs := storeEvents(t, st, api.KindSandbox, "netbox", reasonEgressDenied)
	if len(evs) != 1 {
		t.Fatalf("%d EgressDenied events, want 1", len(evs))
	}
}
