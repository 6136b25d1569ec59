//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qemutest"
)

// hv runs the CLI against the server.
func hv(t *testing.T, p *proc, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"--server", p.url()}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		return out.String() + errOut.String(), fmt.Errorf("hvkube %s: %w: %s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

func mustHV(t *testing.T, p *proc, args ...string) string {
	t.Helper()
	out, err := hv(t, p, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDesktopEndToEnd is a user's first desktop: a template built from the
// image, a sandbox cloned from it, a screenshot, typing, exec, a server
// restart that adopts the running VM, and deletion.
func TestDesktopEndToEnd(t *testing.T) {
	qemutest.RequireImage(t, "linux-desktop")
	dir := t.TempDir()
	p := startServe(t, dir, nil, "--allow-host-path", "/srv")
	mustHV(t, p, "apply", "-f", "../../examples/template.yaml")
	out := mustHV(t, p, "wait", "template", "linux-desktop", "--for", "phase=Ready", "--timeout", "10m")
	if !strings.Contains(out, "Building") || !strings.Contains(out, "template/linux-desktop Ready") {
		t.Fatalf("wait showed no build progress:\n%s", out)
	}
	mustHV(t, p, "apply", "-f", "../../examples/sandbox.yaml")
	mustHV(t, p, "wait", "sandbox", "browser-agent-1", "--for", "phase=Running", "--timeout", "5m")

	shot := filepath.Join(t.TempDir(), "s.png")
	mustHV(t, p, "screen", "browser-agent-1", "--save", shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil || img.Bounds().Dx() != 1280 || img.Bounds().Dy() != 800 {
		t.Fatalf("screenshot: %v %v", img.Bounds(), err)
	}

	mustHV(t, p, "input", "browser-agent-1", "--click", "400,300", "--type", "echo typed > /tmp/typed", "--key", "Return")
	var got string
	for i := 0; i < 50 && got != "typed\n"; i++ {
		got, _ = hv(t, p, "exec", "browser-agent-1", "--", "cat", "/tmp/typed")
		time.Sleep(200 * time.Millisecond)
	}
	if got != "typed\n" {
		t.Fatalf("typed text did not reach the terminal: %q", got)
	}
	// exec exits with the guest's exit code.
	if _, err := hv(t, p, "exec", "browser-agent-1", "--", "sh", "-c", "exit 3"); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("exec exit code: %v", err)
	}

	sandboxBadInput(t, p)
	sandboxActions(t, p)
	sandboxStartupAndChecks(t, p)

	// Restart the server: the VM keeps running and is adopted.
	before := sandboxPID(t, p)
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	p2 := startServe(t, dir, nil)
	time.Sleep(500 * time.Millisecond)
	if after := sandboxPID(t, p2); after != before {
		t.Fatalf("after a restart the sandbox's pid is %d, want %d (adopted)", after, before)
	}
	if out := mustHV(t, p2, "get", "sandbox", "browser-agent-1"); !strings.Contains(out, "Running") {
		t.Fatalf("after restart: %s", out)
	}
	mustHV(t, p2, "screen", "browser-agent-1", "--save", shot)
	mustHV(t, p2, "pause", "browser-agent-1")
	mustHV(t, p2, "resume", "browser-agent-1")

	// Stopping the desktops a server left: refused while a server uses
	// the data directory; after it stopped (saying what it left), they
	// are saved to disk, no QEMU of theirs runs, and the next start
	// brings the sandbox back.
	if out, err := exec.Command(binary, "serve", "--stop-desktops", "--data-dir", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), "in use") {
		t.Fatalf("--stop-desktops beside a running server: %v\n%s", err, out)
	}
	p2.cmd.Process.Signal(syscall.SIGTERM)
	<-p2.done
	if !strings.Contains(p2.log(), "hvkube: 1 desktop keeps running without the server (1 running, 0 paused in memory)") {
		t.Fatalf("the server did not say what it left running:\n%s", p2.log())
	}
	stopped, err := exec.Command(binary, "serve", "--stop-desktops", "--data-dir", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(stopped), "saving desktop browser-agent-1 to disk (1 of 1, Running)") || !strings.Contains(string(stopped), "stopped 1 desktops") {
		t.Fatalf("--stop-desktops: %v\n%s", err, stopped)
	}
	if pids := qemusOf(dir); len(pids) != 0 {
		t.Fatalf("QEMU still runs after --stop-desktops: %v", pids)
	}
	p2 = startServe(t, dir, nil)
	mustHV(t, p2, "wait", "sandbox", "browser-agent-1", "--for", "phase=Saved", "--timeout", "1m")
	mustHV(t, p2, "resume", "browser-agent-1")
	if got, err := hv(t, p2, "exec", "browser-agent-1", "--", "cat", "/tmp/typed"); err != nil || got != "typed\n" {
		t.Fatalf("after --stop-desktops and a start, the desktop as it was: %q %v", got, err)
	}

	mustHV(t, p2, "delete", "sandbox", "browser-agent-1")
	for i := 0; ; i++ {
		if _, err := hv(t, p2, "get", "sandbox", "browser-agent-1"); err != nil {
			break
		}
		if i > 300 {
			t.Fatal("the sandbox was not deleted")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if alive := syscall.Kill(before, 0) == nil; alive {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", before)); strings.Contains(string(b), "hvkube-sandbox:") || strings.Contains(string(b), "hvkube-spare:") {
			t.Fatalf("QEMU %d still runs after the sandbox was deleted", before)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "qemu", "sandboxes")); len(entries) != 0 {
		t.Fatalf("sandbox files left: %v", entries)
	}
}

// sandboxActions drives the action layer through the CLI and the API:
// every action, OpenAI's form, a smaller screen space, zoom and a settled
// screenshot.
func sandboxActions(t *testing.T, p *proc) {
	t.Helper()
	sb := "browser-agent-1"
	// An OpenAI click at the middle of a 1024-wide space lands on the
	// desktop's middle; the pointer reads back in either space.
	mustHV(t, p, "input", sb, "--width", "1024", "--action", `{"type":"click","button":"left","x":512,"y":320}`)
	if out := strings.TrimSpace(mustHV(t, p, "input", sb, "--cursor")); out != "640,400" {
		t.Errorf("after a click at 512,320 of 1024x640 the pointer is at %s, want 640,400", out)
	}
	if out := strings.TrimSpace(mustHV(t, p, "input", sb, "--width", "1024", "--cursor")); out != "512,320" {
		t.Errorf("cursor in the 1024-wide space: %s, want 512,320", out)
	}
	// The rest of the set runs (over the terminal, harmlessly).
	mustHV(t, p, "input", sb, "--move", "500,300", "--mouse-down", "--mouse-up", "--triple-click", "500,300",
		"--middle-click", "1100,300", "--drag", "1100,200,1150,250", "--scroll", "500,300,up,2",
		"--hold-key", "shift", "--duration", "0.2", "--wait", "0.1",
		"--action", `{"type":"keypress","keys":["ESC"]}`, "--action", `{"action":"left_click","coordinate":[400,300],"text":"ctrl"}`)
	if out := strings.TrimSpace(mustHV(t, p, "input", sb, "--cursor")); out != "400,300" {
		t.Errorf("after the last click the pointer is at %s, want 400,300", out)
	}
	// zoom returns the region at full resolution.
	zf := filepath.Join(t.TempDir(), "zoom.png")
	mustHV(t, p, "input", sb, "--width", "640", "--zoom", "0,0,320,200", "--save", zf)
	if img := decodePNG(t, zf); img.Bounds().Dx() != 640 || img.Bounds().Dy() != 400 {
		t.Errorf("zoom of a quarter of a 640-wide space: %v, want 640x400", img.Bounds())
	}
	// While a person holds the sandbox, input is refused naming them; the
	// screen still answers; input works again once they hand it back.
	took := mustHV(t, p, "control", "take", sb, "--holder", "ada")
	_, id, _ := strings.Cut(strings.SplitN(took, "\n", 2)[0], "(take-over ")
	id = strings.TrimSuffix(id, ")")
	_, key, _ := strings.Cut(took, "input key (X-Hvkube-Control): ")
	key, _, _ = strings.Cut(key, "\n")
	if _, err := hv(t, p, "input", sb, "--click", "400,300"); err == nil || !strings.Contains(err.Error(), "ada holds control") {
		t.Errorf("input while a person holds control: %v", err)
	}
	mustHV(t, p, "screen", sb, "--save", filepath.Join(t.TempDir(), "held.png"))
	req, _ := http.NewRequest("POST", p.url()+"/api/v1/sandboxes/"+sb+"/input", strings.NewReader(`{"action":"mouse_move","coordinate":[10,10]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.ControlHeader, id)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusConflict {
		t.Errorf("input with the take-over's id (which agents can read) instead of its key: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	req, _ = http.NewRequest("POST", p.url()+"/api/v1/sandboxes/"+sb+"/input", strings.NewReader(`{"action":"mouse_move","coordinate":[10,10]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.ControlHeader, key)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("input by the holder (take-over %q): %v %v", id, resp, err)
	} else {
		resp.Body.Close()
	}
	mustHV(t, p, "control", "release", sb, "--id", id)
	mustHV(t, p, "input", sb, "--click", "400,300")

	// A settled screenshot comes back, scaled like the space.
	sf := filepath.Join(t.TempDir(), "settled.png")
	mustHV(t, p, "screen", sb, "--settle", "--width", "1024", "--save", sf)
	if img := decodePNG(t, sf); img.Bounds().Dx() != 1024 || img.Bounds().Dy() != 640 {
		t.Errorf("settled screenshot: %v", img.Bounds())
	}
}

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img
}

func sandboxPID(t *testing.T, p *proc) int {
	t.Helper()
	out := mustHV(t, p, "get", "sandbox", "browser-agent-1", "-o", "json")
	var sb struct {
		Status struct {
			PID int `json:"pid"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &sb); err != nil {
		t.Fatal(err)
	}
	return sb.Status.PID
}

// sandboxBadInput sends bad requests to the sandbox endpoints of a running
// desktop: each gets a 4xx naming the field, and the sandbox is unchanged.
func sandboxBadInput(t *testing.T, p *proc) {
	t.Helper()
	base := p.url() + "/api/v1/sandboxes/"
	tests := []struct {
		name, method, path, body string
		code                     int
		field                    string
	}{
		{"click off screen", "POST", "browser-agent-1/input", `{"action":"left_click","coordinate":[1280,10]}`, 400, "coordinate"},
		{"negative coordinate", "POST", "browser-agent-1/input", `{"action":"mouse_move","coordinate":[-5,10]}`, 400, "coordinate"},
		{"one coordinate", "POST", "browser-agent-1/input", `{"action":"mouse_move","coordinate":[5]}`, 400, "coordinate"},
		{"unknown key", "POST", "browser-agent-1/input", `{"action":"key","text":"ctrl+hyperdrive"}`, 400, "text"},
		{"empty text", "POST", "browser-agent-1/input", `{"action":"type","text":""}`, 400, "text"},
		{"unknown action", "POST", "browser-agent-1/input", `{"action":"teleport"}`, 400, "action"},
		{"unknown field", "POST", "browser-agent-1/input", `{"action":"left_click","coords":[1,1]}`, 400, "coords"},
		{"wrong type", "POST", "browser-agent-1/input", `{"action":"left_click","coordinate":"1,1"}`, 400, "coordinate"},
		{"bad scroll", "POST", "browser-agent-1/input", `{"action":"scroll","coordinate":[1,1],"scroll_direction":"inward"}`, 400, "scroll_direction"},
		{"empty body", "POST", "browser-agent-1/input", ``, 400, ""},
		{"unknown sandbox input", "POST", "ghost/input", `{"action":"mouse_move","coordinate":[1,1]}`, 404, ""},
		{"unknown sandbox screen", "GET", "ghost/screen", ``, 404, ""},
		{"bad format", "GET", "browser-agent-1/screen?format=gif", ``, 400, "format"},
		{"bad width", "GET", "browser-agent-1/screen?width=0", ``, 400, "width"},
		{"quality for png", "GET", "browser-agent-1/screen?quality=50", ``, 400, "quality"},
		{"clipboard without text", "POST", "browser-agent-1/clipboard", `{}`, 400, "text"},
		{"exec without command", "POST", "browser-agent-1/exec", `{"args":["x"]}`, 400, "command"},
		{"exec bad env", "POST", "browser-agent-1/exec", `{"command":"env","env":["NOEQUALS"]}`, 400, "env[0]"},
		{"exec bad timeout", "POST", "browser-agent-1/exec", `{"command":"true","timeoutSeconds":-1}`, 400, "timeoutSeconds"},
		{"type too long", "POST", "browser-agent-1/input", `{"action":"type","text":"` + strings.Repeat("a", api.MaxTypeText+1) + `"}`, 400, "text"},
		{"key too long", "POST", "browser-agent-1/input", `{"action":"key","text":"` + strings.Repeat("a", api.MaxKeyText+1) + `"}`, 400, "text"},
		{"hold_key too long", "POST", "browser-agent-1/input", `{"action":"hold_key","text":"shift","duration":3600}`, 400, "duration"},
		{"wait too long", "POST", "browser-agent-1/input", `{"action":"wait","duration":101}`, 400, "duration"},
		{"duplicate key", "POST", "browser-agent-1/input", `{"action":"mouse_move","coordinate":[1,1],"action":"left_click"}`, 400, "action"},
		{"exec duplicate key", "POST", "browser-agent-1/exec", `{"command":"true","command":"reboot"}`, 400, "command"},
		{"openai unknown", "POST", "browser-agent-1/input", `{"type":"teleport"}`, 400, "type"},
		{"openai no y", "POST", "browser-agent-1/input", `{"type":"click","x":1}`, 400, "x"},
		{"off the scaled screen", "POST", "browser-agent-1/input?width=1024", `{"action":"mouse_move","coordinate":[1024,1]}`, 400, "coordinate"},
		{"bad width", "POST", "browser-agent-1/input?width=0", `{"action":"mouse_move","coordinate":[1,1]}`, 400, "width"},
		{"bad settle", "GET", "browser-agent-1/screen?settle=maybe", ``, 400, "settle"},
		{"settle timeout alone", "GET", "browser-agent-1/screen?settleTimeout=2s", ``, 400, "settleTimeout"},
		{"settle timeout too long", "GET", "browser-agent-1/screen?settle=true&settleTimeout=1h", ``, 400, "settleTimeout"},
	}
	// The heartbeat moves lastHeartbeat on its own; the rest must not move.
	state := func() string {
		var sb struct {
			Metadata struct {
				Generation int64 `json:"generation"`
			} `json:"metadata"`
			Spec   json.RawMessage `json:"spec"`
			Status struct {
				Phase string `json:"phase"`
				PID   int    `json:"pid"`
			} `json:"status"`
		}
		json.Unmarshal([]byte(mustHV(t, p, "get", "sandbox", "browser-agent-1", "-o", "json")), &sb)
		return fmt.Sprintf("%d %s %s %d", sb.Metadata.Generation, sb.Spec, sb.Status.Phase, sb.Status.PID)
	}
	before := state()
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, base+tt.path, strings.NewReader(tt.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error string `json:"error"`
			Field string `json:"field"`
		}
		json.Unmarshal(b, &e)
		if resp.StatusCode != tt.code || e.Field != tt.field || e.Error == "" {
			t.Errorf("%s: %d %s, want %d naming %q", tt.name, resp.StatusCode, b, tt.code, tt.field)
		}
	}
	if after := state(); after != before {
		t.Errorf("bad input changed the sandbox:\n%s\n%s", before, after)
	}
}

// sandboxStartupAndChecks applies a sandbox with a startup command and a
// process health check, and one with volumes the backend cannot map.
func sandboxStartupAndChecks(t *testing.T, p *proc) {
	t.Helper()
	dir := t.TempDir()
	manifest := `apiVersion: hvkube/v1
kind: Sandbox
metadata: {name: with-startup}
spec:
  templateRef: linux-desktop
  startup:
  - {command: sleep, args: ["600"]}
  healthCheck: {type: process, processName: sleep, intervalSeconds: 1}
---
apiVersion: hvkube/v1
kind: Sandbox
metadata: {name: with-volumes}
spec:
  templateRef: linux-desktop
  volumes:
  - {name: data, hostPath: /srv/data, sandboxPath: /data}
`
	f := filepath.Join(dir, "more.yaml")
	os.WriteFile(f, []byte(manifest), 0o644)
	mustHV(t, p, "apply", "-f", f)
	mustHV(t, p, "wait", "sandbox", "with-startup", "--for", "phase=Running", "--timeout", "5m")
	if out, _ := hv(t, p, "wait", "sandbox", "with-volumes", "--for", "phase=Running", "--timeout", "2m"); !strings.Contains(out, "Unsupported") {
		t.Errorf("a sandbox with volumes: %s", out)
	}
	if out := mustHV(t, p, "exec", "with-startup", "--", "pgrep", "-x", "sleep"); strings.TrimSpace(out) == "" {
		t.Errorf("the startup command does not run")
	}
	// The process check passes: the heartbeat moves on within a few
	// intervals.
	first, beat := "", ""
	for i := 0; i < 100 && (beat == "" || beat == first); i++ {
		var sb struct {
			Status struct {
				LastHeartbeat string `json:"lastHeartbeat"`
				Reason        string `json:"reason"`
			} `json:"status"`
		}
		json.Unmarshal([]byte(mustHV(t, p, "get", "sandbox", "with-startup", "-o", "json")), &sb)
		if sb.Status.Reason == "Unhealthy" {
			t.Fatalf("the process health check failed")
		}
		if first == "" {
			first = sb.Status.LastHeartbeat
		}
		beat = sb.Status.LastHeartbeat
		time.Sleep(200 * time.Millisecond)
	}
	if beat == first {
		t.Errorf("no heartbeat from the process health check after %s", first)
	}
	mustHV(t, p, "delete", "-f", f)
}
