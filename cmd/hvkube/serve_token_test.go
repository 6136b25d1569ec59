//go:build linux

package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/node"
)

// envWithout is os.Environ() without the variables named.
func envWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			keep = keep && k != n
		}
		if keep {
			env = append(env, kv)
		}
	}
	return env
}

// get calls the API with token (none when "") and returns the status code
// and body.
func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// TestServeCreatesAndUsesTokenFile: given no token, serve creates a random
// one in DATA-DIR/token (0600, in a 0700 directory), requires it, and
// keeps it across restarts; the CLI on this machine finds it by itself.
func TestServeCreatesAndUsesTokenFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	env := envWithout("HVKUBE_TOKEN", "HVKUBE_DATA_DIR")
	p := startServeAs(t, dir, env, "--backend", "none")
	path := filepath.Join(dir, "token")
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{dir, 0o700}, {path, 0o600}} {
		fi, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != f.mode {
			t.Errorf("%s: mode %04o, want %04o", f.path, fi.Mode().Perm(), f.mode)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(b))
	if len(token) != 64 {
		t.Fatalf("token %q, want 64 hex digits", token)
	}
	if !strings.Contains(p.log(), path+" (created)") {
		t.Errorf("the log does not say where the token was created:\n%s", p.log())
	}
	if strings.Contains(p.log(), token) {
		t.Error("the log shows the token")
	}
	if code, _ := get(t, p.url()+"/api/v1/sandboxpools", ""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", code)
	}
	if code, body := get(t, p.url()+"/api/v1/sandboxpools", token); code != http.StatusOK {
		t.Errorf("with the token: %d %s", code, body)
	}

	cli := func(extra ...string) (string, error) {
		cmd := exec.Command(binary, "get", "pools", "--server", p.url())
		cmd.Env = append(envWithout("HVKUBE_TOKEN", "HVKUBE_DATA_DIR"), extra...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := cli("HVKUBE_DATA_DIR=" + dir); err != nil {
		t.Errorf("the CLI did not pick up the token file: %v %s", err, out)
	}
	if out, err := cli("HVKUBE_DATA_DIR="+dir, "HVKUBE_TOKEN="); err == nil {
		t.Errorf("HVKUBE_TOKEN set to nothing still sent a token: %s", out)
	}

	p.cmd.Process.Kill()
	<-p.done
	p2 := startServeAs(t, dir, env, "--backend", "none")
	if strings.Contains(p2.log(), "(created)") {
		t.Errorf("a restart made a new token:\n%s", p2.log())
	}
	if code, body := get(t, p2.url()+"/api/v1/sandboxpools", token); code != http.StatusOK {
		t.Errorf("after a restart, with the first token: %d %s", code, body)
	}
}

// TestServeClearsTokenFromEnviron: a token given in HVKUBE_TOKEN works, and
// is no longer in the server's /proc/PID/environ, which its children (and
// any process of its user) could read.
func TestServeClearsTokenFromEnviron(t *testing.T) {
	const token = "environ-marker-5e2a"
	p := startServeAs(t, t.TempDir(), append(envWithout("HVKUBE_TOKEN"), "HVKUBE_TOKEN="+token), "--backend", "none")
	if code, body := get(t, p.url()+"/api/v1/sandboxpools", token); code != http.StatusOK {
		t.Fatalf("with the token: %d %s", code, body)
	}
	out, err := exec.Command("cat", fmt.Sprintf("/proc/%d/environ", p.cmd.Process.Pid)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "PATH=") {
		t.Fatalf("read no environment: %q", out)
	}
	if strings.Contains(string(out), token) || strings.Contains(string(out), "HVKUBE_TOKEN") {
		t.Error("the server's /proc/PID/environ still shows HVKUBE_TOKEN")
	}
}

// TestServeMakesDataDirPrivate: a data directory others may read is made
// 0700, and the log says so.
func TestServeMakesDataDirPrivate(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, dir, nil, "--backend", "none")
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %04o, want 0700", fi.Mode().Perm())
	}
	if !strings.Contains(p.log(), "made it private") || !strings.Contains(p.log(), "was=0755") {
		t.Errorf("the log does not say the mode was changed:\n%s", p.log())
	}
}

// TestServeInsecureNoToken: --insecure-no-token serves without a token,
// makes no token file, and says so in the log and /healthz.
func TestServeInsecureNoToken(t *testing.T) {
	dir := t.TempDir()
	p := startServeAs(t, dir, envWithout("HVKUBE_TOKEN"), "--backend", "none", "--insecure-no-token")
	if !strings.Contains(p.log(), "WITHOUT A TOKEN") {
		t.Errorf("the log does not warn:\n%s", p.log())
	}
	if _, err := os.Stat(filepath.Join(dir, "token")); !os.IsNotExist(err) {
		t.Errorf("a token file was made: %v", err)
	}
	if code, body := get(t, p.url()+"/api/v1/sandboxpools", ""); code != http.StatusOK {
		t.Errorf("without a token: %d %s", code, body)
	}
	if _, body := get(t, p.url()+"/healthz", ""); !strings.Contains(body, "insecure-no-token") {
		t.Errorf("/healthz does not say it: %q", body)
	}
}

// TestServeTokenAndHostCommandFlags: flags that contradict each other or
// cannot be honoured stop the server at start with the reason.
func TestServeTokenAndHostCommandFlags(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"insecure with a token file", nil, []string{"--insecure-no-token", "--token-file", tokenFile}, "--insecure-no-token contradicts"},
		{"insecure with HVKUBE_TOKEN", []string{"HVKUBE_TOKEN=s3cret"}, []string{"--insecure-no-token"}, "--insecure-no-token contradicts"},
		{"insecure on an open address", nil, []string{"--insecure-no-token", "--addr", "0.0.0.0:0"}, "refusing to listen on 0.0.0.0:0 without a token"},
		{"a host command user without the flag", nil, []string{"--host-command-user", "nobody"}, "--host-command-user needs --allow-host-commands"},
		{"root as the host command user", nil, []string{"--allow-host-commands", "--host-command-user", "root"}, "is root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "root as the host command user" && os.Geteuid() != 0 {
				t.Skip("a server that is not root refuses --allow-host-commands before it looks at the user")
			}
			args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--backend", "none"}, tt.args...)
			cmd := exec.Command(binary, args...)
			cmd.Env = append(envWithout("HVKUBE_TOKEN"), tt.env...)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tt.want) {
				t.Fatalf("err %v, output %s; want %q", err, out, tt.want)
			}
		})
	}
}

// TestServeAllowHostCommands: as root, --allow-host-commands starts and
// names the account commands run as.
func TestServeAllowHostCommands(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: host commands are allowed only to a server that can switch users")
	}
	p := startServe(t, t.TempDir(), nil, "--backend", "none", "--allow-host-commands")
	if !strings.Contains(p.log(), "--allow-host-commands") || !strings.Contains(p.log(), "nobody") {
		t.Errorf("the log does not say host commands are allowed, and as whom:\n%s", p.log())
	}

	// A data directory or token file the host commands' user owns is
	// theirs to read, whatever its mode.
	nobody, err := node.LookupHostUser("nobody")
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, owned := range map[string]string{"data directory": dir, "token file": tokenFile} {
		t.Run(name, func(t *testing.T) {
			if err := os.Chown(owned, int(nobody.UID), int(nobody.GID)); err != nil {
				t.Fatal(err)
			}
			defer os.Chown(owned, 0, 0)
			cmd := exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--backend", "none", "--allow-host-commands", "--token-file", tokenFile)
			cmd.Env = envWithout("HVKUBE_TOKEN")
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "nobody owns "+owned) {
				t.Fatalf("err %v, output %s", err, out)
			}
		})
	}
}
