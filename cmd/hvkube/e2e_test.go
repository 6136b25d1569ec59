//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/kube/kubetest"
)

var binary string

// TestMain builds the hvkube binary once; the tests run it as users do.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hvkube-e2e-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "hvkube")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := kubetest.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

type proc struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{} // closed when the process has exited
	err  error
	logs *strings.Builder
	mu   *sync.Mutex
}

var listenRE = regexp.MustCompile(`hvkube server listening" addr=(\S+)`)

// startServe runs `hvkube serve` on a free loopback port and waits until it
// listens. Given no token (--token-file or HVKUBE_TOKEN), it runs with
// --insecure-no-token, as the tests' clients send none.
func startServe(t *testing.T, dataDir string, extraEnv []string, args ...string) *proc {
	t.Helper()
	env := append(os.Environ(), extraEnv...)
	if !slices.Contains(args, "--token-file") && envValue(env, "HVKUBE_TOKEN") == "" {
		args = append(args, "--insecure-no-token")
	}
	return startServeAs(t, dataDir, env, args...)
}

// envValue is the value of name in env, the last one when it is there
// more than once (as exec.Cmd does).
func envValue(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// startServeAs runs `hvkube serve` with exactly env and args (after the
// loopback address and the data directory) and waits until it listens.
func startServeAs(t *testing.T, dataDir string, env []string, args ...string) *proc {
	t.Helper()
	return startProc(t, dataDir, env, listenRE, append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir}, args...)...)
}

// startProc runs the hvkube binary with env and args and waits until its
// log says it listens (listen's first group is the address).
func startProc(t *testing.T, dataDir string, env []string, listen *regexp.Regexp, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = env
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), logs: &strings.Builder{}, mu: &sync.Mutex{}}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := listen.FindStringSubmatch(sc.Text()); m != nil {
				addrc <- m[1]
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
		// VMs outlive the server by design; a test that failed half way
		// must not leave its VMs running.
		for _, pid := range qemusOf(dataDir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	select {
	case p.addr = <-addrc:
	case <-p.done:
		t.Fatalf("%s exited: %v\n%s", args[0], p.err, p.logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start:\n%s", args[0], p.logs)
	}
	return p
}

func (p *proc) url() string { return "http://" + p.addr }

// TestKillDuringWritesLosesNothing SIGKILLs the server while clients
// write, restarts it on the same data directory, and checks that every
// write it acknowledged is there.
func TestKillDuringWritesLosesNothing(t *testing.T) {
	dir := t.TempDir()
	p := startServe(t, dir, nil)
	var mu sync.Mutex
	var acked []string
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for i := 0; ctx.Err() == nil; i++ {
				name := fmt.Sprintf("job-%d-%d", w, i)
				body := fmt.Sprintf(`{"apiVersion":"hvkube/v1","kind":"Agent","metadata":{"name":%q},"spec":{"sandboxName":"desk"}}`, name)
				resp, err := client.Post(p.url()+"/api/v1/agents", "application/json", strings.NewReader(body))
				if err != nil {
					return // the server is gone
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusCreated {
					mu.Lock()
					acked = append(acked, name)
					mu.Unlock()
				}
			}
		}(w)
	}
	time.Sleep(1500 * time.Millisecond)
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	cancel()
	wg.Wait()
	if len(acked) < 10 {
		t.Fatalf("only %d writes acknowledged before the kill", len(acked))
	}

	p2 := startServe(t, dir, nil)
	for _, name := range acked {
		resp, err := http.Get(p2.url() + "/api/v1/agents/" + name)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("acknowledged agent %s lost after SIGKILL: %d", name, resp.StatusCode)
		}
	}
	t.Logf("%d acknowledged writes survived SIGKILL", len(acked))
}

func TestServeRefusesOpenAddressWithoutToken(t *testing.T) {
	cmd := exec.Command(binary, "serve", "--addr", "0.0.0.0:0", "--data-dir", t.TempDir(), "--insecure-no-token")
	cmd.Env = append(os.Environ(), "HVKUBE_TOKEN=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "refusing to listen on 0.0.0.0:0 without a token") {
		t.Fatalf("err %v, output %s", err, out)
	}
}

// TestServeHyperVFlags: the hyperv backend names what it lacks, and a
// credential file others may read is refused.
func TestServeHyperVFlags(t *testing.T) {
	dir := t.TempDir()
	cred := filepath.Join(dir, "guest.json")
	if err := os.WriteFile(cred, []byte(`{"user":"agent","password":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--backend hyperv needs --guest-credential-file"},
		{[]string{"--guest-credential-file", filepath.Join(dir, "missing.json")}, "--guest-credential-file: stat"},
		{[]string{"--guest-credential-file", cred}, "--guest-credential-file: " + cred + " is accessible by group or others"},
	} {
		args := append([]string{"serve", "--backend", "hyperv", "--addr", "127.0.0.1:0", "--data-dir", dir}, c.args...)
		out, err := exec.Command(binary, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("serve %v: err %v, output %s; want %q", c.args, err, out, c.want)
		}
	}
	os.Chmod(cred, 0o600)
	out, err := exec.Command(binary, "serve", "--backend", "hyperv", "--addr", "127.0.0.1:0", "--data-dir", dir, "--guest-credential-file", cred).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Hyper-V does not answer") {
		t.Errorf("serve --backend hyperv off Windows: err %v, output %s", err, out)
	}
}

func TestServeWithTokenAndGracefulShutdown(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600)
	p := startServe(t, t.TempDir(), nil, "--token-file", tokenFile)
	cli := func(env ...string) (string, error) {
		cmd := exec.Command(binary, "get", "pools", "--server", p.url())
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := cli("HVKUBE_TOKEN="); err == nil || !strings.Contains(out, "bearer token") {
		t.Fatalf("without token: %v %s", err, out)
	}
	if out, err := cli("HVKUBE_TOKEN=s3cret"); err != nil {
		t.Fatalf("with token: %v %s", err, out)
	}
	// A watch is open while the server shuts down; it must not hold it up.
	watch := exec.Command(binary, "get", "pools", "-w", "--server", p.url())
	watch.Env = append(os.Environ(), "HVKUBE_TOKEN=s3cret")
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer watch.Process.Kill()
	time.Sleep(300 * time.Millisecond)
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("serve exited with %v after SIGTERM", p.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop within 10s of SIGTERM")
	}
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestWatchSurvivesRestart: `get -w` keeps going across a restart of the
// server, and shows what changed while it was down.
func TestWatchSurvivesRestart(t *testing.T) {
	dir, addr := t.TempDir(), freePort(t)
	p := startServe(t, dir, nil, "--backend", "none", "--addr", addr)
	hv(t, p, "apply", "-f", "../../examples/sandboxpool.yaml")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := exec.CommandContext(ctx, binary, "--server", p.url(), "get", "pools", "-w", "--no-headers")
	out, _ := watch.StdoutPipe()
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); watch.Wait() }()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l := <-lines:
			return strings.Join(strings.Fields(l), " ")
		case <-time.After(20 * time.Second):
			return "timeout"
		}
	}
	if got := next(); !strings.HasPrefix(got, "browser-workers 0/5 ") {
		t.Fatalf("first line %q", got)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	p2 := startServe(t, dir, nil, "--backend", "none", "--addr", addr)
	mustHV(t, p2, "scale", "browser-workers", "--replicas", "3")
	// The pool's controller writes its status too; the scale shows up
	// among those lines.
	for {
		got := next()
		if strings.HasPrefix(got, "browser-workers 0/3 ") {
			break
		}
		if got == "timeout" {
			t.Fatal("the watch did not show the scale made after the restart")
		}
	}
}

// TestServeRefusesAnOpenKeyFile: the key signs tokens and seals Secrets'
// values: a data directory's key file that group or others may read is
// refused, and serve says how to fix it.
func TestServeRefusesAnOpenKeyFile(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "token.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("k", 32)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--backend", "none").CombinedOutput()
	if err == nil || !strings.Contains(string(out), key+" is accessible by group or others") || !strings.Contains(string(out), "chmod 600") {
		t.Fatalf("serve with an open key file: err %v, output %s", err, out)
	}
}
