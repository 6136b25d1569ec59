package cli

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

// startServerWithSandbox runs an API server (no VM backend) whose store
// holds a sandbox named desk-1 with the status a node would write.
func startServerWithSandbox(t *testing.T, status api.SandboxStatus) string {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir(), store.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(server.Options{Store: st, Version: "test"}).Handler())
	t.Cleanup(func() {
		srv.Close()
		st.Close()
	})
	o, err := api.DecodeOne([]byte("apiVersion: hvkube/v1\nkind: Sandbox\nmetadata: {name: desk-1}\nspec: {templateRef: linux-desktop}\n"), api.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	api.Default(o)
	out, err := st.Create(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	sb := out.(*api.Sandbox)
	sb.Status = status
	if _, err := st.UpdateStatus(ctx, sb); err != nil {
		t.Fatal(err)
	}
	return srv.URL
}

// TestVMProcessShown: the PID of a sandbox's VM process (for a sandbox
// that took a spare, a QEMU named as the spare) is in get sandboxes -o
// wide, vm list and vm info; a guest stopped on a failed disk write shows
// as IOError.
func TestVMProcessShown(t *testing.T) {
	running := api.SandboxStatus{Phase: api.SandboxRunning, Reason: "Started", Node: "n1", PID: 4242,
		Display: "unix:/run/hvkube/0a1b2c/vnc.sock", Template: "linux-desktop", Resolution: "1280x800"}
	url := startServerWithSandbox(t, running)
	row := regexp.MustCompile(`(?m)^desk-1\s+Running\s+-\s+-\s+\S+\s+linux-desktop\s+1280x800\s+unix:/run/hvkube/0a1b2c/vnc.sock\s+4242$`)
	for _, args := range [][]string{{"get", "sandboxes", "-o", "wide"}, {"vm", "list"}} {
		out := mustRun(t, url, args...)
		if !strings.Contains(out, "PID") || !row.MatchString(out) {
			t.Errorf("hvkube %s:\n%s\nwant a PID column holding 4242", strings.Join(args, " "), out)
		}
	}
	info := mustRun(t, url, "vm", "info", "desk-1")
	for _, want := range []string{"VM:      desk-1 (Running)\n", "Node:    n1\n", "Process: 4242\n", "Display: unix:/run/hvkube/0a1b2c/vnc.sock\n", "\nName:             desk-1\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("vm info does not show %q:\n%s", want, info)
		}
	}

	stopped := running
	stopped.Reason, stopped.Message = "IOError", "the guest stopped on a failed disk write and cannot run yet"
	url = startServerWithSandbox(t, stopped)
	if out := mustRun(t, url, "get", "sandboxes"); !regexp.MustCompile(`(?m)^desk-1\s+IOError\s`).MatchString(out) {
		t.Errorf("get sandboxes of a guest stopped on a failed write:\n%s\nwant STATUS IOError", out)
	}
	if out := mustRun(t, url, "vm", "info", "desk-1"); !strings.Contains(out, "VM:      desk-1 (IOError)\n") {
		t.Errorf("vm info of a guest stopped on a failed write:\n%s", out)
	}
}
