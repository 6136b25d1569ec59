//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/client"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qemutest"
	"github.com/hvkube/hvkube/internal/kube/kubetest"
)

var nodeListenRE = regexp.MustCompile(`hvkube node listening" node=\S+ listen=(\S+)`)

// cluster is hvkube on a real kube-apiserver: one hvkube serve without a
// backend (the API and the cluster controllers) and hvkube node processes,
// each with a data directory and a port of its own, sharing one key.
type cluster struct {
	t          *testing.T
	kubeconfig string
	key        string
	api        *proc
	c          *client.Client
	nodes      map[string]*proc
	dirs       map[string]string
	identity   map[string]string // the identity file of each node
	// tlsURL is the API's TLS listener, where the nodes join, and ca
	// the file of its authority (hvkube ca).
	tlsURL, ca string
	token      string // the API's
}

func newCluster(t *testing.T, serveArgs ...string) *cluster {
	t.Helper()
	env := kubetest.Start(t)
	ns := env.Namespace(t)
	cl := &cluster{t: t, kubeconfig: env.Kubeconfig(t, ns), key: filepath.Join(t.TempDir(), "key"), nodes: map[string]*proc{}, dirs: map[string]string{}, identity: map[string]string{}}
	if err := os.WriteFile(cl.key, []byte(rand.Text()+rand.Text()), 0o600); err != nil {
		t.Fatal(err)
	}
	// The API has a token of its own (HVKUBE_TOKEN, which the CLI the
	// tests run takes too): the nodes' identities reach none of it but
	// their two routes.
	cl.token = rand.Text()
	t.Setenv("HVKUBE_TOKEN", cl.token)
	cl.api = startServe(t, t.TempDir(), nil, append([]string{"--backend", "none", "--store", "kubernetes", "--kubeconfig", cl.kubeconfig, "--key-file", cl.key,
		"--tls-addr", "127.0.0.1:0", "--tls-names", "127.0.0.1"}, serveArgs...)...)
	cl.tlsURL, cl.ca = cl.api.tlsURL(t), writeCA(t, cl.api, cl.key)
	c, err := client.New(cl.api.url(), cl.token)
	if err != nil {
		t.Fatal(err)
	}
	cl.c = c
	return cl
}

// startNode runs hvkube node NAME on the QEMU backend, with an identity
// of its own (hvkube node identity) and not the key.
func (cl *cluster) startNode(name string, args ...string) *proc {
	cl.t.Helper()
	dir := cl.t.TempDir()
	id := filepath.Join(cl.t.TempDir(), "identity")
	out := mustHV(cl.t, cl.api, "node", "identity", name, "--key-file", cl.key, "--valid", "1h")
	if err := os.WriteFile(id, []byte(out), 0o600); err != nil {
		cl.t.Fatal(err)
	}
	// A node holds no token of the API's.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "HVKUBE_TOKEN=") })
	p := startProc(cl.t, dir, env, nodeListenRE, append([]string{"node", "--store", "kubernetes", "--kubeconfig", cl.kubeconfig,
		"--node-name", name, "--listen", "127.0.0.1:0", "--identity-file", id, "--data-dir", dir, "--server-url", cl.tlsURL, "--server-ca", cl.ca,
		"--image-dir", qemu.DefaultImageDir()}, args...)...)
	cl.nodes[name], cl.dirs[name], cl.identity[name] = p, dir, id
	return p
}

// sandboxes returns the pool's sandboxes by node.
func (cl *cluster) sandboxes(pool string) map[string][]*api.Sandbox {
	cl.t.Helper()
	items, err := cl.c.List(context.Background(), api.KindSandbox, "")
	if err != nil {
		cl.t.Fatal(err)
	}
	m := map[string][]*api.Sandbox{}
	for _, it := range items {
		sb := it.(*api.Sandbox)
		if api.OwnerOf(sb, api.KindSandboxPool) == pool && sb.Metadata.DeletionTimestamp == nil {
			m[sb.Status.Node] = append(m[sb.Status.Node], sb)
		}
	}
	return m
}

func (cl *cluster) waitFor(what string, timeout time.Duration, cond func() (bool, string)) {
	cl.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, s := cond()
		if ok {
			return
		}
		last = s
		time.Sleep(250 * time.Millisecond)
	}
	var logs strings.Builder
	for name, p := range cl.nodes {
		fmt.Fprintf(&logs, "--- node %s:\n%s", name, tail(p.log(), 40))
	}
	cl.t.Fatalf("%s: after %s still %s\n--- serve:\n%s%s", what, timeout, last, tail(cl.api.log(), 40), logs.String())
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ready reports the pool's Running or Paused sandboxes per node.
func ready(byNode map[string][]*api.Sandbox) (map[string]int, string) {
	counts := map[string]int{}
	var desc []string
	for node, sbs := range byNode {
		for _, sb := range sbs {
			desc = append(desc, fmt.Sprintf("%s@%s:%s", sb.Metadata.Name, node, sb.Status.Phase))
			if sb.Status.Phase == api.SandboxRunning || sb.Status.Phase == api.SandboxPaused {
				counts[node]++
			}
		}
	}
	sort.Strings(desc)
	return counts, strings.Join(desc, " ")
}

// TestNodesShareAPoolOnKubernetes runs two hvkube node processes on real
// QEMU beside one hvkube serve without a backend, all on a real
// kube-apiserver: a pool of two spreads over both nodes; the screen and
// exec of each sandbox reach it through the API server, which proxies to
// the node that owns it; a third node joins and attacks both (attackFrom),
// and node-a attacks node-b; when node-b is killed, the cluster marks it
// lost and the pool refills on node-a; an agent then runs once.
func TestNodesShareAPoolOnKubernetes(t *testing.T) {
	qemutest.RequireImage(t, "linux-desktop")
	cl := newCluster(t, "--node-grace", "30s")
	cl.startNode("node-a")
	cl.startNode("node-b")
	pool := `apiVersion: hvkube.io/v1
kind: SandboxPool
metadata: {name: spread}
spec:
  replicas: 2
  maxPerHost: 2
  warmTier: paused
  releasePolicy: reset
  template:
    metadata:
      labels: {pool: spread}
    spec:
      templateRef: linux-desktop
      resources: {cpu: 1, memoryMB: 512}
`
	f := filepath.Join(t.TempDir(), "pool.yaml")
	os.WriteFile(f, []byte(pool), 0o600)
	mustHV(t, cl.api, "apply", "-f", "../../examples/template.yaml", "-f", f)

	cl.waitFor("the pool spread over both nodes", 15*time.Minute, func() (bool, string) {
		counts, desc := ready(cl.sandboxes("spread"))
		return counts["node-a"] == 1 && counts["node-b"] == 1, desc
	})
	// Every operation goes through the API server, which has no backend:
	// it can only have reached the owners.
	for node, sbs := range cl.sandboxes("spread") {
		name := sbs[0].Metadata.Name
		shot := filepath.Join(t.TempDir(), "s.png")
		mustHV(t, cl.api, "screen", name, "--save", shot)
		b, err := os.ReadFile(shot)
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("screen of %s on %s: %v (%d bytes)", name, node, err, len(b))
		}
		mustHV(t, cl.api, "resume", name)
		res, err := cl.c.Exec(context.Background(), name, "/bin/sh", []string{"-c", "echo from $(hostname)"}, "")
		if err != nil || res.ExitCode != 0 || !strings.HasPrefix(res.Stdout, "from ") {
			t.Errorf("exec in %s on %s: %+v %v", name, node, res, err)
		}
	}

	// A third node joins, with no image to build the template from (so
	// no VM: it runs no desktop), and attacks both others; node-a then
	// attacks node-b.
	cl.startNode("node-c", "--image-dir", t.TempDir())
	cl.waitFor("node-c reports", time.Minute, func() (bool, string) {
		o, err := cl.c.Get(context.Background(), api.KindNode, "node-c")
		if err != nil {
			return false, err.Error()
		}
		return o.(*api.Node).Status.LastHeartbeat != nil, "no heartbeat yet"
	})
	cl.attackFrom("node-c", "node-a")
	cl.attackFrom("node-c", "node-b")
	cl.attackFrom("node-a", "node-b")
	// node-c leaves first, so that it is lost by the time node-b is and
	// the pool refills on node-a alone.
	cl.nodes["node-c"].cmd.Process.Kill()
	<-cl.nodes["node-c"].done

	// Kill node-b: no goodbye, its QEMU processes go with it.
	victim := cl.nodes["node-b"]
	lost := cl.sandboxes("spread")["node-b"][0].Metadata.Name
	victim.cmd.Process.Kill()
	<-victim.done
	for _, pid := range qemusOf(cl.dirs["node-b"]) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	cl.waitFor("node-b marked lost", 2*time.Minute, func() (bool, string) {
		o, err := cl.c.Get(context.Background(), api.KindNode, "node-b")
		if err != nil {
			return false, err.Error()
		}
		c := api.FindCondition(o.(*api.Node).Status.Conditions, "Ready")
		if c == nil {
			return false, "no Ready condition"
		}
		return c.Status == api.ConditionFalse && c.Reason == "NodeLost", c.Status + " " + c.Reason
	})
	cl.waitFor("the pool refilled on node-a", 10*time.Minute, func() (bool, string) {
		byNode := cl.sandboxes("spread")
		counts, desc := ready(byNode)
		for _, sb := range byNode["node-b"] {
			if sb.Metadata.Name == lost {
				return false, "the lost sandbox is still a member: " + desc
			}
		}
		return counts["node-a"] == 2, desc
	})
	if _, err := cl.c.Exec(context.Background(), lost, "/bin/true", nil, ""); err == nil {
		t.Errorf("the lost node's sandbox %s still answers", lost)
	}

	agent := `apiVersion: hvkube.io/v1
kind: Agent
metadata: {name: once}
spec:
  sandboxSelector:
    matchLabels: {pool: spread}
  type: workflow
  task:
    steps:
    - {action: exec, command: [/bin/sh, -c, "echo ran >> /tmp/runs"]}
`
	af := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(af, []byte(agent), 0o600)
	mustHV(t, cl.api, "apply", "-f", af)
	mustHV(t, cl.api, "wait", "agent", "once", "--for", "phase=Completed", "--timeout", "5m")
	o, err := cl.c.Get(context.Background(), api.KindAgent, "once")
	if err != nil {
		t.Fatal(err)
	}
	if a := o.(*api.Agent); a.Status.Attempts != 1 || a.Status.Node != "node-a" {
		t.Errorf("agent: %d attempts on %q, want 1 on node-a", a.Status.Attempts, a.Status.Node)
	}
}

// attackFrom is what a node taken over tries first against another node,
// with all it holds: its identity, and the credentials of the API
// servers' requests it was sent. None of it reaches the victim, and the
// victim's sandbox still answers the API servers after.
func (cl *cluster) attackFrom(attacker, victim string) {
	t := cl.t
	t.Helper()
	ctx := context.Background()
	id, err := os.ReadFile(cl.identity[attacker])
	if err != nil {
		t.Fatal(err)
	}
	ident := strings.TrimSpace(string(id))
	o, err := cl.c.Get(ctx, api.KindNode, victim)
	if err != nil {
		t.Fatal(err)
	}
	addr := o.(*api.Node).Status.Address
	target := cl.sandboxes("spread")[victim][0].Metadata.Name
	keyb, err := os.ReadFile(cl.key)
	if err != nil {
		t.Fatal(err)
	}
	// A credential the attacker was sent for a request to itself, the
	// same path on its own node, replayed to the victim.
	path := "/node/v1/sandboxes/" + target + "/exec"
	seen := authtoken.Key(keyb).NodeSigner().MintRequest(attacker, "POST", path, time.Now())
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, c := range []struct {
		what, url, auth string
	}{
		{"its own request's credential, replayed", "https://" + addr + path, "Bearer " + seen},
		{"its identity", "https://" + addr + path, "Bearer " + ident},
		{"nothing, in plain HTTP", "http://" + addr + path, ""},
	} {
		req, _ := http.NewRequest(http.MethodPost, c.url, strings.NewReader(`{"Path":"/bin/sh","Args":["-c","touch /tmp/owned"]}`))
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := insecure.Do(req)
		if err != nil {
			continue // refused before HTTP: fine
		}
		resp.Body.Close()
		if resp.StatusCode/100 == 2 {
			t.Errorf("attacker %s reached %s's node API with %s: %d", attacker, victim, c.what, resp.StatusCode)
		}
	}
	// Through the API servers, with its identity: as the victim on the
	// two routes an identity reaches (403), and anywhere else (401): the
	// victim's sandbox (read, exec, a display token, a take-over) and an
	// agent's token.
	for _, c := range []struct {
		what, method, path, body string
		want                     int
	}{
		{"join as the victim", "POST", "/api/v1/nodes/" + victim + "/join", `{"csr":""}`, http.StatusForbidden},
		{"an agent token as the victim", "POST", "/api/v1/nodes/" + victim + "/agent-token", `{"agent":"once","attempt":1}`, http.StatusForbidden},
		{"read the victim's sandbox", "GET", "/api/v1/sandboxes/" + target, "", http.StatusUnauthorized},
		{"exec in the victim's sandbox", "POST", "/api/v1/sandboxes/" + target + "/exec", `{"command":["/bin/true"]}`, http.StatusUnauthorized},
		{"a display token", "POST", "/api/v1/sandboxes/" + target + "/display/token", `{}`, http.StatusUnauthorized},
		{"a take-over", "POST", "/api/v1/sandboxes/" + target + "/control", `{}`, http.StatusUnauthorized},
		{"an agent's token", "POST", "/api/v1/agents/once/token", `{}`, http.StatusUnauthorized},
		{"write a sandbox", "PUT", "/api/v1/sandboxes/" + target, `{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"` + target + `"}}`, http.StatusUnauthorized},
	} {
		req, _ := http.NewRequest(c.method, cl.api.url()+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+ident)
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("attacker %s: %s: %d, want %d", attacker, c.what, resp.StatusCode, c.want)
		}
	}
	// The victim's sandbox is untouched and still answers.
	res, err := cl.c.Exec(ctx, target, "/bin/sh", []string{"-c", "test ! -e /tmp/owned && echo clean"}, "")
	if err != nil || strings.TrimSpace(res.Stdout) != "clean" {
		t.Errorf("the victim's sandbox after the attack: %+v %v", res, err)
	}
}
