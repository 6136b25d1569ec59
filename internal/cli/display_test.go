package cli

import (
	"context"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

// displayServer serves sandbox "desk", which has a display and is held by
// take-over "take-1", "cold", which has none, and "win", a Hyper-V VM.
func displayServer(t *testing.T, key authtoken.Key) string {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"desk", "cold", "win"} {
		sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		sb.Metadata.Name = name
		api.Default(sb)
		if _, err := st.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reconcile.UpdateStatus(ctx, st, api.KindSandbox, "desk", func(sb *api.Sandbox) bool {
		sb.Status.Phase, sb.Status.Display, sb.Status.Resolution = api.SandboxRunning, "unix:/run/hvkube/x/vnc.sock", "1280x800"
		sb.Status.Control = &api.SandboxControl{ID: "take-1", Holder: "ana"}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := reconcile.UpdateStatus(ctx, st, api.KindSandbox, "win", func(sb *api.Sandbox) bool {
		sb.Status.Phase, sb.Status.Display = api.SandboxRunning, "vmconnect:localhost/hvkube-win"
		return true
	}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(server.Options{Store: st, ScopedKey: key}).Handler())
	t.Cleanup(func() {
		srv.Close()
		st.Close()
	})
	return srv.URL
}

// tokenOf returns the display token in a link.
func tokenOf(t *testing.T, link string) string {
	t.Helper()
	u, err := url.Parse(strings.TrimSpace(link))
	if err != nil {
		t.Fatal(err)
	}
	q := u.RawQuery
	if u.Fragment != "" {
		_, q, _ = strings.Cut(u.Fragment, "?")
	}
	v, err := url.ParseQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	return v.Get("token")
}

func TestDisplayURL(t *testing.T) {
	key := authtoken.Key([]byte(strings.Repeat("c", 32)))
	srv := displayServer(t, key)
	verify := func(t *testing.T, link string) authtoken.DisplayClaims {
		t.Helper()
		c, err := key.VerifyDisplay(tokenOf(t, link), time.Now())
		if err != nil {
			t.Fatalf("token in %q: %v", link, err)
		}
		return c
	}

	out := mustRun(t, srv, "display", "url", "desk")
	if !strings.HasPrefix(out, srv+"/#/sandboxes/desk?token=ey") || strings.Count(out, "\n") != 1 {
		t.Fatalf("display url printed %q", out)
	}
	if c := verify(t, out); c.Sandbox != "desk" || c.Control != "" || c.ExpiresAt-c.IssuedAt != 300 {
		t.Fatalf("claims %+v", c)
	}

	out = mustRun(t, srv, "display", "url", "desk", "--ttl", "30m", "--ws", "--control", key.ControlKey("desk", "take-1"))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	ws := "ws" + strings.TrimPrefix(srv, "http") + "/api/v1/sandboxes/desk/display?token="
	if len(lines) != 2 || !strings.HasPrefix(lines[1], ws) {
		t.Fatalf("display url --ws printed %q", out)
	}
	if c := verify(t, lines[1]); c.Control != "take-1" || c.ExpiresAt-c.IssuedAt != 1800 {
		t.Fatalf("claims %+v", c)
	}

	if out := mustRun(t, srv, "console", "desk"); !strings.HasPrefix(out, srv+"/#/sandboxes/desk?token=") {
		t.Fatalf("console printed %q", out)
	}
	out = mustRun(t, srv, "vm", "console", "desk")
	for _, want := range []string{"sandbox/desk is Running", "display:    unix:/run/hvkube/x/vnc.sock", "live view:  " + srv + "/#/sandboxes/desk?token="} {
		if !strings.Contains(out, want) {
			t.Fatalf("vm console printed %q, want %q in it", out, want)
		}
	}

	// A Hyper-V sandbox's display is its VM's console.
	if out := mustRun(t, srv, "vm", "console", "win"); out != "vmconnect.exe localhost hvkube-win\n" {
		t.Fatalf("vm console of a Hyper-V sandbox printed %q", out)
	}
	if runtime.GOOS != "windows" {
		out, errOut, code := run(t, srv, "console", "win", "--open")
		if code != 1 || out != "vmconnect.exe localhost hvkube-win\n" || !strings.Contains(errOut, "run the command above on Windows") {
			t.Fatalf("console --open of a Hyper-V sandbox off Windows: exit %d, %q, %q", code, out, errOut)
		}
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"display", "url", "cold"}, "sandbox/cold has no display yet: it is Pending"},
		{[]string{"console", "cold"}, "sandbox/cold has no display yet"},
		{[]string{"display", "url", "nope"}, `sandbox "nope" not found`},
		{[]string{"display", "url", "desk", "--control", key.ControlKey("desk", "take-0")}, `control: not the key of the current take-over`},
		{[]string{"display", "url", "desk", "--control", "take-1"}, `control: not the key of the current take-over`},
		{[]string{"display", "url", "desk", "--ttl", "2h"}, "--ttl 2h0m0s: want 1s to 1h0m0s"},
	} {
		out, errOut, code := run(t, srv, tt.args...)
		if code != 1 || out != "" || !strings.Contains(errOut, tt.want) {
			t.Errorf("hvkube %v: exit %d, stdout %q, stderr %q; want %q", tt.args, code, out, errOut, tt.want)
		}
	}
}

// TestConsoleOpen opens the link with xdg-open (a stand-in that records
// its arguments and environment): the link is its argument, and the API
// token is not in its environment.
func TestConsoleOpen(t *testing.T) {
	key := authtoken.Key([]byte(strings.Repeat("c", 32)))
	srv := displayServer(t, key)
	bin := t.TempDir()
	rec := filepath.Join(bin, "rec")
	script := "#!/bin/sh\necho \"$1\" > " + rec + "\nenv >> " + rec + "\n"
	if err := os.WriteFile(filepath.Join(bin, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Setenv("HVKUBE_TOKEN", "api-secret")
	out := mustRun(t, srv, "console", "desk", "--open")
	b, err := os.ReadFile(rec)
	if err != nil {
		t.Fatalf("xdg-open did not run: %v", err)
	}
	first, env, _ := strings.Cut(string(b), "\n")
	if first != strings.TrimSpace(out) {
		t.Fatalf("xdg-open got %q, printed %q", first, out)
	}
	if strings.Contains(env, "api-secret") {
		t.Fatal("the API token reached xdg-open's environment")
	}
}
