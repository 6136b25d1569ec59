package main

import (
	"crypto/x509"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/nodeca"
)

// TestWebhookConfigCommand: hvkube webhook-config prints a configuration
// whose authority checks the certificate hvkube serve makes for its
// webhook under the same key; bad flags are refused, naming the flag.
func TestWebhookConfigCommand(t *testing.T) {
	_, keyFile, key := keyDir(t)
	run := func(args ...string) (string, error) { return runCommand(newWebhookConfigCmd(), args...) }
	out, err := run("--key-file", keyFile, "--namespace", "desks")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Webhooks []struct {
			ClientConfig struct {
				CABundle string `json:"caBundle"`
				Service  struct{ Name, Namespace string }
			} `json:"clientConfig"`
		}
	}
	if err := yaml.Unmarshal([]byte(out), &cfg); err != nil || len(cfg.Webhooks) != 1 {
		t.Fatalf("%v: %s", err, out)
	}
	cc := cfg.Webhooks[0].ClientConfig
	if cc.Service.Name != "hvkube" || cc.Service.Namespace != "desks" {
		t.Errorf("service %+v", cc.Service)
	}
	pemCA, _ := base64.StdEncoding.DecodeString(cc.CABundle)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCA) {
		t.Fatalf("caBundle holds no certificate: %q", pemCA)
	}
	ca, _ := nodeca.New(authtoken.Key(key).APICASeed())
	cert, err := ca.Issue(serviceNames("desks"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "hvkube.desks.svc"}); err != nil {
		t.Errorf("the webhook's certificate does not verify against the printed authority: %v", err)
	}
	if strings.Contains(out, string(key)) {
		t.Error("the configuration holds the key")
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{nil, "--key-file"},
		{[]string{"--key-file", keyFile, "--namespace", "Bad_NS"}, "--namespace"},
	} {
		if _, err := run(c.args...); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.says)
		}
	}
}
