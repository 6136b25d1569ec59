//go:build linux

package main

import (
	"crypto/rand"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/server"
)

var tlsListenRE = regexp.MustCompile(`hvkube server listening over TLS" addr=(\S+)`)

// tlsURL is the https address of p's --tls-addr, from its log.
func (p *proc) tlsURL(t *testing.T) string {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	m := tlsListenRE.FindStringSubmatch(p.logs.String())
	if m == nil {
		t.Fatalf("no TLS listener in the log:\n%s", p.logs)
	}
	return "https://" + m[1]
}

// writeCA writes what hvkube ca prints for keyFile into a file of its own.
func writeCA(t *testing.T, p *proc, keyFile string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, []byte(mustHV(t, p, "ca", "--key-file", keyFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestServeOverTLS: hvkube serve --tls-addr serves the API over TLS with
// a certificate from the key's authority (hvkube ca). The CLI reaches it
// with --ca-file (or HVKUBE_CA_FILE) and refuses it without, or with
// another key's authority; plain HTTP on the TLS port gets nothing; and
// the admission webhook, which answers there only with the Kubernetes
// store, is not served with SQLite.
func TestServeOverTLS(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	other := filepath.Join(dir, "other-key")
	for _, k := range []string{key, other} {
		if err := os.WriteFile(k, []byte(rand.Text()+rand.Text()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := startServe(t, t.TempDir(), nil, "--backend", "none", "--key-file", key, "--tls-addr", "127.0.0.1:0", "--tls-names", "127.0.0.1")
	url := p.tlsURL(t)
	ca, otherCA := writeCA(t, p, key), writeCA(t, p, other)

	if _, err := hv(t, p, "--server", url, "--ca-file", ca, "get", "templates"); err != nil {
		t.Errorf("get over TLS with the server's authority: %v", err)
	}
	cmd := exec.Command(binary, "--server", url, "version")
	cmd.Env = append(os.Environ(), "HVKUBE_CA_FILE="+ca)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "Server Version") {
		t.Errorf("version over TLS with HVKUBE_CA_FILE: %v: %s", err, out)
	}
	for _, c := range []struct {
		name string
		args []string
		says string
	}{
		{"no authority", []string{"--server", url}, "certificate"},
		{"another key's authority", []string{"--server", url, "--ca-file", otherCA}, "certificate"},
		{"no such file", []string{"--server", url, "--ca-file", filepath.Join(dir, "none")}, "--ca-file"},
		{"not PEM", []string{"--server", url, "--ca-file", key}, "--ca-file"},
	} {
		if out, err := hv(t, p, append(c.args, "get", "templates")...); err == nil || !strings.Contains(out, c.says) {
			t.Errorf("%s: %v (%q), want refused naming %s", c.name, err, out, c.says)
		}
	}

	// Plain HTTP to the TLS port.
	resp, err := http.Get("http://" + strings.TrimPrefix(url, "https://") + "/api/v1/templates")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("plain HTTP to the TLS port: %d, want 400", resp.StatusCode)
	}
	// No webhook without the Kubernetes store: the path is the API's,
	// behind its token.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err = hc.Post(url+server.WebhookPath, "application/json", strings.NewReader(`{"kind":"AdmissionReview"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK || strings.Contains(string(body), "AdmissionReview") {
		t.Errorf("the webhook answered with SQLite: %d %s", resp.StatusCode, body)
	}
}
