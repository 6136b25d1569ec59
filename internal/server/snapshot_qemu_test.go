//go:build linux

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/node"
	"github.com/hvkube/hvkube/internal/store"
	"github.com/hvkube/hvkube/internal/testbench"
)

// TestSnapshotToTemplateOnQEMU sets a desktop up by hand (a file), makes a
// template of it through the API, and clones a sandbox of that template:
// the clone has the file. Bad requests are refused and change nothing.
func TestSnapshotToTemplateOnQEMU(t *testing.T) {
	d := startQEMUDesk(t)
	ctx := context.Background()
	var res ExecResponse
	d.call(t, "POST", "/api/v1/sandboxes/desk/exec", `{"command":"sh","args":["-c","echo by-hand > /root/setup && sync"],"timeoutSeconds":60}`, &res)
	if res.ExitCode != 0 {
		t.Fatalf("set-up: exit %d: %s", res.ExitCode, res.Stderr)
	}

	post := func(body string) (int, string) {
		req, _ := http.NewRequest("POST", d.url+"/api/v1/sandboxes/desk/snapshot", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer admin")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tt := range []struct {
		body string
		code int
		say  string
	}{
		{`{}`, http.StatusBadRequest, "template"},
		{`{"template":"Not_A_Name"}`, http.StatusBadRequest, "template"},
		{`{"template":"desk-tpl"}`, http.StatusConflict, "exists"},
		{`{"template":"x","extra":1}`, http.StatusBadRequest, "extra"},
	} {
		if code, body := post(tt.body); code != tt.code || !strings.Contains(body, tt.say) {
			t.Errorf("snapshot %s: %d %s, want %d naming %q", tt.body, code, body, tt.code, tt.say)
		}
	}
	if items, _, _ := d.st.List(ctx, api.KindTemplate, api.Selector{}); len(items) != 1 {
		t.Fatalf("%d templates after the refused snapshots, want 1", len(items))
	}

	start := time.Now()
	code, body := post(`{"template":"desk-setup"}`)
	if code != http.StatusCreated {
		t.Fatalf("snapshot: %d %s", code, body)
	}
	t.Logf("snapshot answered in %s", time.Since(start).Round(time.Millisecond))
	var tpl api.Template
	if err := json.Unmarshal([]byte(body), &tpl); err != nil {
		t.Fatal(err)
	}
	if tpl.Status.Phase != api.TemplateReady || tpl.Status.Reason != node.ReasonCaptured || tpl.Spec.Source == nil || tpl.Spec.Source.Sandbox != "desk" {
		t.Fatalf("the template: %s (%s: %s), source %+v", tpl.Status.Phase, tpl.Status.Reason, tpl.Status.Message, tpl.Spec.Source)
	}
	// The source runs on.
	d.call(t, "POST", "/api/v1/sandboxes/desk/exec", `{"command":"true","timeoutSeconds":60}`, &res)

	clone := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	clone.Metadata.Name = "clone"
	clone.Spec.TemplateRef = "desk-setup"
	if err := d.srv.admit(clone); err != nil {
		t.Fatal(err)
	}
	if _, err := d.st.Create(ctx, clone); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(300 * time.Millisecond) {
		o, err := d.st.Get(ctx, api.KindSandbox, "clone")
		if err != nil {
			t.Fatal(err)
		}
		s := o.(*api.Sandbox).Status
		if s.Phase == api.SandboxRunning {
			break
		}
		if s.Phase == api.SandboxError || time.Now().After(deadline) {
			t.Fatalf("clone is %s: %s", s.Phase, s.Message)
		}
	}
	d.call(t, "POST", "/api/v1/sandboxes/clone/exec", `{"command":"cat","args":["/root/setup"],"timeoutSeconds":60}`, &res)
	if strings.TrimSpace(res.Stdout) != "by-hand" {
		t.Errorf("the clone of the snapshot has %q in /root/setup, want what was set up by hand", res.Stdout)
	}

	t.Run("Fork", func(t *testing.T) {
		for _, body := range []string{`{"count":0}`, `{"count":101}`, `{}`} {
			req, _ := http.NewRequest("POST", d.url+"/api/v1/sandboxes/clone/fork", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer admin")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "count") {
				t.Errorf("fork %s: %d %s, want a 400 naming count", body, resp.StatusCode, b)
			}
		}
		// The clone writes more and opens a window, then is forked three
		// times.
		d.call(t, "POST", "/api/v1/sandboxes/clone/exec", `{"command":"sh","args":["-c","echo fork-me >> /root/setup && sync"],"timeoutSeconds":60}`, &res)
		d.call(t, "POST", "/api/v1/sandboxes/clone/exec", forkWindow("setsid xterm -title fork-window </dev/null >/dev/null 2>&1 & xdotool search --sync --name '^fork-window$' >/dev/null"), &res)
		if res.ExitCode != 0 {
			t.Fatalf("open a window: exit %d: %s", res.ExitCode, res.Stderr)
		}
		start := time.Now()
		var fr ForkResponse
		d.call(t, "POST", "/api/v1/sandboxes/clone/fork", `{"count":3}`, &fr)
		created := time.Since(start)
		if len(fr.Sandboxes) != 3 || !strings.HasPrefix(fr.Template, "clone-fork-") {
			t.Fatalf("fork: %+v", fr)
		}
		for _, name := range fr.Sandboxes {
			for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
				o, err := d.st.Get(ctx, api.KindSandbox, name)
				if err != nil {
					t.Fatal(err)
				}
				sb := o.(*api.Sandbox)
				if sb.Status.Phase == api.SandboxRunning {
					if sb.Metadata.Labels[LabelForkOf] != "clone" {
						t.Errorf("fork %s's labels: %v", name, sb.Metadata.Labels)
					}
					break
				}
				if sb.Status.Phase == api.SandboxError || time.Now().After(deadline) {
					t.Fatalf("fork %s is %s: %s", name, sb.Status.Phase, sb.Status.Message)
				}
			}
		}
		t.Logf("fork of 3: created in %s, all running %s after the request", created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		hosts := map[string]bool{}
		for _, name := range fr.Sandboxes {
			d.call(t, "POST", "/api/v1/sandboxes/"+name+"/exec", forkWindow("xdotool search --name '^fork-window$' >/dev/null"), &res)
			if res.ExitCode != 0 {
				t.Errorf("fork %s has no window fork-window: %s", name, res.Stderr)
			}
			d.call(t, "POST", "/api/v1/sandboxes/"+name+"/exec", `{"command":"sh","args":["-c","cat /root/setup; hostname"],"timeoutSeconds":60}`, &res)
			lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
			if len(lines) != 3 || lines[0] != "by-hand" || lines[1] != "fork-me" {
				t.Errorf("fork %s has %q, want the clone's file as it was", name, res.Stdout)
				continue
			}
			hosts[lines[2]] = true
		}
		if len(hosts) != 3 {
			t.Errorf("the forks' hostnames %v: want three of their own", hosts)
		}
	})
}

// BenchmarkForkOnQEMU forks a running linux desktop into 1 and into 10,
// b.N times each: the time from the request to its answer (the sandboxes
// created) and to all of them running. The forks are deleted between
// rounds.
func BenchmarkForkOnQEMU(b *testing.B) {
	d := startQEMUDesk(b)
	ctx := context.Background()
	var res ExecResponse
	d.call(b, "POST", "/api/v1/sandboxes/desk/exec", `{"command":"sh","args":["-c","echo fork-me > /root/setup && sync"],"timeoutSeconds":60}`, &res)
	for _, count := range []int{1, 10} {
		b.Run(fmt.Sprintf("count=%d", count), func(b *testing.B) {
			var created, running []time.Duration
			for b.Loop() {
				start := time.Now()
				var fr ForkResponse
				d.call(b, "POST", "/api/v1/sandboxes/desk/fork", fmt.Sprintf(`{"count":%d}`, count), &fr)
				created = append(created, time.Since(start))
				waitSandboxes(b, d, fr.Sandboxes, func(s api.SandboxStatus) bool { return s.Phase == api.SandboxRunning })
				running = append(running, time.Since(start))
				b.StopTimer()
				for _, name := range fr.Sandboxes {
					if _, _, err := d.st.Delete(ctx, api.KindSandbox, name, store.DeleteOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
					items, _, _ := d.st.List(ctx, api.KindSandbox, api.Selector{})
					if len(items) == 1 {
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("%d sandboxes a minute after the forks' deletion", len(items))
					}
				}
				time.Sleep(2 * time.Second)
				b.StartTimer()
			}
			b.StopTimer()
			testbench.Percentiles(b, "created", created)
			testbench.Percentiles(b, "running", running)
			b.ReportMetric(0, "ns/op")
		})
	}
}

// waitSandboxes waits up to 3 minutes for every sandbox of names to be as
// ok says.
func waitSandboxes(t testing.TB, d *qemuDesk, names []string, ok func(api.SandboxStatus) bool) {
	t.Helper()
	for _, name := range names {
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			o, err := d.st.Get(context.Background(), api.KindSandbox, name)
			if err != nil {
				t.Fatal(err)
			}
			s := o.(*api.Sandbox).Status
			if ok(s) {
				break
			}
			if s.Phase == api.SandboxError || time.Now().After(deadline) {
				t.Fatalf("sandbox %s is %s: %s", name, s.Phase, s.Message)
			}
		}
	}
}

// forkWindow is an exec body that runs script on the desktop's display.
func forkWindow(script string) string {
	return fmt.Sprintf(`{"command":"sh","args":["-c",%q],"env":["DISPLAY=:0","XAUTHORITY=/home/agent/.Xauthority"],"timeoutSeconds":60}`, script)
}
