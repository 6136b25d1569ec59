//go:build linux

package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// requireNetworkImage is requireImage for an image that declares its
// guest's network (image.json's network): one built before guest networks
// is a skip, or a failure under HVKUBE_REQUIRE_QEMU.
func requireNetworkImage(t testing.TB, flavor string) string {
	t.Helper()
	dir := requireImage(t)
	b, err := os.ReadFile(filepath.Join(dir, flavor, "current", "image.json"))
	if err != nil {
		if os.Getenv("HVKUBE_REQUIRE_QEMU") != "" {
			t.Fatalf("the %s image is not built: %v", flavor, err)
		}
		t.Skipf("the %s image is not built (%v)", flavor, err)
	}
	var info imageInfo
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatalf("%s image.json: %v", flavor, err)
	}
	if info.Network == nil {
		if os.Getenv("HVKUBE_REQUIRE_QEMU") != "" {
			t.Fatalf("the %s image declares no network (image.json has no network): rebuild it", flavor)
		}
		t.Skipf("the %s image declares no network (image.json has no network): rebuild it", flavor)
	}
	return dir
}

// hostServer is an HTTP server on the host's 127.0.0.1 that answers every
// request with body; it returns its port.
func hostServer(t *testing.T, body string) int {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

// fetchScript GETs / from host $1, port $2 with bash's /dev/tcp (the
// desktop image has no HTTP client); it exits 7 when it cannot connect.
const fetchScript = `exec 3<>"/dev/tcp/$1/$2" || exit 7; printf 'GET / HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" >&3; cat <&3`

// guestFetch has the guest run fetchScript, bounded by timeout(1) so that
// a fetch that hangs says so (exit status 124) instead of hanging the
// test.
func guestFetch(t *testing.T, b *Backend, id, host string, port int) backend.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := b.Exec(ctx, id, backend.ExecRequest{Path: "timeout", Args: []string{"20", "bash", "-c", fetchScript, "fetch", host, strconv.Itoa(port)}})
	if err != nil {
		t.Fatalf("exec in %s: %v", id, err)
	}
	return res
}

// wantFetched checks that a fetch got the server's body.
func wantFetched(t *testing.T, res backend.ExecResult, body string) {
	t.Helper()
	if res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), "HTTP/1.0 200") || !strings.HasSuffix(string(res.Stdout), body) {
		t.Fatalf("fetch: exit %d, stdout %q, stderr %q; want 200 and %q", res.ExitCode, res.Stdout, res.Stderr, body)
	}
}

// wantRefused checks that a fetch failed at once with "connection
// refused", not by running into its timeout.
func wantRefused(t *testing.T, res backend.ExecResult) {
	t.Helper()
	if res.ExitCode != 7 || !strings.Contains(string(res.Stderr), "Connection refused") {
		t.Fatalf("fetch: exit %d, stdout %q, stderr %q; want exit 7 (connect failed) with Connection refused", res.ExitCode, res.Stdout, res.Stderr)
	}
}

// waitDenied waits until Inspect reports at least n denials of sandbox
// id, and returns its network.
func waitDenied(t *testing.T, b *Backend, id string, n int64) *backend.NetworkInfo {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := b.Inspect(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Network != nil && info.Network.Denied >= n {
			return info.Network
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s reports %+v, want %d denials", id, info.Network, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cmdlineOf is QEMU process pid's command line.
func cmdlineOf(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// TestGuestNetwork runs clones of a template built with a network: a
// clone reaches a host service its egress rules allow, right after its
// first resume, through its gateway; without the rule, and to a host
// service that stands for hvkube's API, its connection is refused at once
// and the denial is reported; DNS answers the backend's static names;
// spares let nothing through until a sandbox takes them; mode none
// reaches nothing; DialPort reaches a port in the guest; and the network
// survives save and restore, a reset, and a restart of the backend.
func TestGuestNetwork(t *testing.T) {
	imageDir := requireNetworkImage(t, "linux-desktop")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	allowedPort := hostServer(t, "allowed")
	apiPort := hostServer(t, "hvkube API")
	cfg := Config{Dir: t.TempDir(), ImageDir: imageDir, MaxSpares: 1,
		NetworkHosts: map[string][]netip.Addr{"allowed.hvkube.test": {netip.MustParseAddr("127.0.0.1")}}}
	b, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cur := b // the backend the cleanups use: a restart replaces it
	t.Cleanup(func() { cur.Close() })
	tpl, err := b.BuildTemplate(ctx, backend.TemplateSpec{ID: "net", Image: api.QEMUImage{Image: "linux-desktop"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !tpl.Network {
		t.Fatal("the template was built without a network device")
	}
	allow := api.Network{Egress: api.Egress{Allow: []string{"127.0.0.1:" + strconv.Itoa(allowedPort)}}}
	outer := t
	create := func(t *testing.T, id string, n api.Network) backend.Info {
		t.Helper()
		info, err := b.Create(ctx, backend.SandboxSpec{ID: id, TemplateID: "net", Network: n})
		if err != nil {
			t.Fatal(err)
		}
		// The sandboxes live on for the subtests after the one that made
		// them.
		outer.Cleanup(func() { cur.Delete(context.Background(), id) })
		return info
	}
	resume := func(t *testing.T, id string) {
		t.Helper()
		if err := b.Resume(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("FirstResumeFetches", func(t *testing.T) {
		info := create(t, "net-a", allow)
		if info.Network == nil || info.Network.Mode != api.NetworkNAT || info.Network.Address != "10.0.2.15" {
			t.Fatalf("network of a new clone: %+v", info.Network)
		}
		args := strings.Join(cmdlineOf(t, info.PID), " ")
		want := "-netdev stream,id=net0,server=on,addr.type=unix,addr.path=" + filepath.Join(b.runDirFor(b.sbDir("net-a")), netSocketName)
		if !strings.Contains(args, want) || !strings.Contains(args, "virtio-net-pci,netdev=net0,mac=52:54:00:12:34:56") || strings.Contains(args, "-nic none") {
			t.Errorf("QEMU's command line lacks the NIC (%s):\n%s", want, args)
		}
		resume(t, "net-a")
		wantFetched(t, guestFetch(t, b, "net-a", "10.0.2.2", allowedPort), "allowed")
	})

	t.Run("RefusedAtOnceAndReported", func(t *testing.T) {
		// hvkube's API listens on the host's loopback too: not allowed.
		wantRefused(t, guestFetch(t, b, "net-a", "10.0.2.2", apiPort))
		nw := waitDenied(t, b, "net-a", 1)
		if nw.LastDenied == nil || nw.LastDenied.Destination != "127.0.0.1:"+strconv.Itoa(apiPort) || nw.LastDenied.Reason != "Blocked" {
			t.Errorf("latest denial %+v, want 127.0.0.1:%d Blocked", nw.LastDenied, apiPort)
		}
		// A private address is refused by default.
		res := guestFetch(t, b, "net-a", "192.168.7.7", 80)
		wantRefused(t, res)
		if nw := waitDenied(t, b, "net-a", 2); nw.LastDenied.Destination != "192.168.7.7:80" {
			t.Errorf("latest denial %+v, want 192.168.7.7:80", nw.LastDenied)
		}
	})

	t.Run("DNS", func(t *testing.T) {
		res, err := b.Exec(ctx, "net-a", backend.ExecRequest{Path: "getent", Args: []string{"hosts", "allowed.hvkube.test"}})
		if err != nil || res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), "10.0.2.2 ") {
			t.Fatalf("getent hosts allowed.hvkube.test: %q %q %v; want 10.0.2.2 (the host's loopback)", res.Stdout, res.Stderr, err)
		}
		wantFetched(t, guestFetch(t, b, "net-a", "allowed.hvkube.test", allowedPort), "allowed")
	})

	t.Run("SpareTakesItsSandboxsPolicy", func(t *testing.T) {
		sp := waitSpareOf(t, b, "net")
		if sp.p.link == nil {
			t.Fatal("the spare has no guest network")
		}
		if pol := sp.p.link.nw.Policy(); len(pol.Allow) != 0 || len(pol.Deny) == 0 || pol.Deny[0].String() != "0.0.0.0/0" || sp.p.link.dns.open.Load() {
			t.Errorf("a spare's network allows %v, denies %v, DNS open %v; want nothing through", pol.Allow, pol.Deny, sp.p.link.dns.open.Load())
		}
		// Without the rule the same fetch is refused.
		info := create(t, "net-b", api.Network{})
		if info.PID != sp.p.pid {
			t.Fatalf("the clone did not take the spare (%d, spare %d)", info.PID, sp.p.pid)
		}
		resume(t, "net-b")
		wantRefused(t, guestFetch(t, b, "net-b", "10.0.2.2", allowedPort))
		if nw := waitDenied(t, b, "net-b", 1); nw.Denied != 1 {
			t.Errorf("net-b reports %d denials, want its own 1", nw.Denied)
		}
	})

	t.Run("ModeNoneReachesNothing", func(t *testing.T) {
		info := create(t, "net-n", api.Network{Mode: api.NetworkNone})
		if info.Network == nil || info.Network.Mode != api.NetworkNone || info.Network.Address != "" || info.Network.Unavailable != "" {
			t.Fatalf("network of a clone with mode none: %+v", info.Network)
		}
		resume(t, "net-n")
		wantRefused(t, guestFetch(t, b, "net-n", "10.0.2.2", allowedPort))
		res, err := b.Exec(ctx, "net-n", backend.ExecRequest{Path: "getent", Args: []string{"hosts", "allowed.hvkube.test"}})
		if err != nil || res.ExitCode == 0 {
			t.Errorf("getent with mode none: %q %v, want no answer", res.Stdout, err)
		}
		if _, err := b.DialPort(ctx, "net-n", 22); !errors.Is(err, api.ErrUnsupported) {
			t.Errorf("DialPort with mode none: %v, want ErrUnsupported", err)
		}
	})

	t.Run("DialPort", func(t *testing.T) {
		// A one-line server in the guest (perl is in every Debian).
		server := `use IO::Socket::INET; my $s = IO::Socket::INET->new(LocalAddr => "0.0.0.0:8765", Listen => 5, ReuseAddr => 1) or die "listen: $!"; while (my $c = $s->accept) { print $c "hello from the guest\n"; close $c }`
		if _, err := b.Exec(ctx, "net-a", backend.ExecRequest{Path: "perl", Args: []string{"-e", server}, Detach: true}); err != nil {
			t.Fatal(err)
		}
		var line string
		deadline := time.Now().Add(30 * time.Second)
		for {
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c, err := b.DialPort(dctx, "net-a", 8765)
			cancel()
			if err == nil {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				line, err = bufio.NewReader(c).ReadString('\n')
				c.Close()
				if err == nil {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("DialPort to the guest's server: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if line != "hello from the guest\n" {
			t.Fatalf("read %q from the guest", line)
		}
		_, err := b.DialPort(ctx, "net-a", 8766)
		for _, cat := range []error{api.ErrConflict, api.ErrNotFound, api.ErrInvalid, api.ErrUnsupported, api.ErrUnavailable} {
			if err == nil || errors.Is(err, cat) {
				t.Fatalf("a port nothing listens on: %v, want an error of no category", err)
			}
		}
		if _, err := b.DialPort(ctx, "net-a", 0); api.FieldOf(err) != "port" {
			t.Errorf("port 0: %v, want ErrInvalid naming port", err)
		}
		if err := b.Pause(ctx, "net-a"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.DialPort(ctx, "net-a", 8765); !errors.Is(err, api.ErrConflict) {
			t.Errorf("DialPort to a paused sandbox: %v, want ErrConflict", err)
		}
		resume(t, "net-a")
	})

	t.Run("SavedAndRestored", func(t *testing.T) {
		before := waitDenied(t, b, "net-a", 0).Denied
		if err := b.Save(ctx, "net-a"); err != nil {
			t.Fatal(err)
		}
		if info, _ := b.Inspect(ctx, "net-a"); info.Network == nil || info.Network.Mode != api.NetworkNAT || info.Network.Denied != before {
			t.Errorf("network of the saved sandbox: %+v, want nat with %d denials", info.Network, before)
		}
		resume(t, "net-a") // restores
		wantFetched(t, guestFetch(t, b, "net-a", "10.0.2.2", allowedPort), "allowed")
		wantRefused(t, guestFetch(t, b, "net-a", "10.0.2.2", apiPort))
		waitDenied(t, b, "net-a", before+1)
	})

	t.Run("Reset", func(t *testing.T) {
		waitSpareOf(t, b, "net")
		if err := b.Reset(ctx, "net-a"); err != nil {
			t.Fatal(err)
		}
		resume(t, "net-a")
		wantFetched(t, guestFetch(t, b, "net-a", "10.0.2.2", allowedPort), "allowed")
	})

	t.Run("RestartAdopts", func(t *testing.T) {
		before := waitDenied(t, b, "net-a", 0).Denied
		b.Close()
		b2, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, cur = b2, b2
		if nw := waitDenied(t, b, "net-a", 0); nw.Denied != before {
			t.Errorf("after a restart net-a reports %d denials, want the %d from before", nw.Denied, before)
		}
		wantFetched(t, guestFetch(t, b, "net-a", "10.0.2.2", allowedPort), "allowed")
		wantRefused(t, guestFetch(t, b, "net-a", "10.0.2.2", apiPort))
		waitDenied(t, b, "net-a", before+1)
	})
}

// waitSpareOf waits (a minute at most) until template tplID has a spare
// ready, and returns it.
func waitSpareOf(t *testing.T, b *Backend, tplID string) *spare {
	t.Helper()
	b.refillSpares(b.mustTemplate(t, tplID))
	deadline := time.Now().Add(time.Minute)
	for {
		b.mu.Lock()
		var sp *spare
		if set := b.spares[tplID]; set != nil && len(set.ready) > 0 {
			sp = set.ready[0]
		}
		b.mu.Unlock()
		if sp != nil {
			return sp
		}
		if time.Now().After(deadline) {
			t.Fatal("no spare was made in a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSnapshotWithoutNetwork: a template built with network mode none has
// no NIC in its snapshot, and neither has any clone of it, whatever the
// clone's spec asks: it loads, runs, and says it has no network and why.
func TestSnapshotWithoutNetwork(t *testing.T) {
	imageDir := requireImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	b, err := New(ctx, Config{Dir: t.TempDir(), ImageDir: imageDir, NoSpares: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tpl, err := b.BuildTemplate(ctx, backend.TemplateSpec{ID: "nonet", Image: api.QEMUImage{Image: "linux-desktop"}, NetworkMode: api.NetworkNone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Network {
		t.Fatal("a template with mode none was built with a network device")
	}
	info, err := b.Create(ctx, backend.SandboxSpec{ID: "nonet-a", TemplateID: "nonet"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Delete(context.Background(), "nonet-a")
	args := strings.Join(cmdlineOf(t, info.PID), " ")
	if !strings.Contains(args, "-nic none") || strings.Contains(args, "-netdev") {
		t.Errorf("a clone of a snapshot without a NIC has one:\n%s", args)
	}
	if !strings.HasPrefix(qemuName(t, info.PID), sandboxNamePrefix+"nonet-a:") {
		t.Errorf("the clone was not started from the snapshot (cold-booted?): %s", args)
	}
	if nw := info.Network; nw == nil || nw.Mode != api.NetworkNone || !strings.Contains(nw.Unavailable, "rebuild the template") {
		t.Errorf("network of a nat sandbox on a snapshot without a NIC: %+v, want none, saying rebuild the template", nw)
	}
	if err := b.Resume(ctx, "nonet-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DialPort(ctx, "nonet-a", 22); !errors.Is(err, api.ErrUnsupported) || !strings.Contains(err.Error(), "rebuild the template") {
		t.Errorf("DialPort: %v, want ErrUnsupported saying rebuild the template", err)
	}
	var meta vmMeta
	if err := readJSON(filepath.Join(b.sbDir("nonet-a"), "vm.json"), &meta); err != nil || meta.ColdBoot {
		t.Errorf("the clone cold-booted (%v): its devices differ from its snapshot's", err)
	}
}
