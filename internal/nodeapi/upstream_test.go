package nodeapi_test

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/nodeapi"
	"github.com/hvkube/hvkube/internal/nodeca"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

// TestUpstreamOnAServer: a node joins a real server with its identity and
// is given the key that checks the server's requests; it gets the token
// of its own running attempt, and a refusal (not a retry) for another
// node's agent or under another node's name.
func TestUpstreamOnAServer(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key := authtoken.Key(strings.Repeat("k", 32))
	srv := server.New(server.Options{Store: st, Token: "admin", ScopedKey: key,
		NodeIdentity: func(_ context.Context, tok string) (string, error) { return key.VerifyNodeIdentity(tok, time.Now()) }})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)

	for _, b := range []struct{ agent, node string }{{"mine", "node-a"}, {"theirs", "node-b"}} {
		a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
		a.Metadata.Name = b.agent
		a.Spec.SandboxName, a.Spec.Type = "desk", "mcp-agent"
		api.Default(a)
		created, err := st.Create(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reconcile.UpdateStatus(ctx, st, api.KindAgent, b.agent, func(a *api.Agent) bool {
			a.Status.Phase, a.Status.Sandbox, a.Status.Attempts, a.Status.Node = api.AgentRunning, "desk", 1, b.node
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if b.agent != "mine" {
			continue
		}
		// The sandbox the scheduler claimed for it on node-a: a node gets
		// the token only of an attempt on a claim.
		sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		sb.Metadata.Name = "desk"
		api.Default(sb)
		if _, err := st.Create(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if _, err := reconcile.UpdateStatus(ctx, st, api.KindSandbox, "desk", func(sb *api.Sandbox) bool {
			sb.Status.Node, sb.Status.CurrentAgent = b.node, b.agent
			sb.Status.Claim = &api.AgentClaim{UID: created.GetMeta().UID, Attempt: 1}
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	id := key.MintNodeIdentity("node-a", time.Now(), time.Hour)
	up := &nodeapi.Upstream{Server: ts.URL, Node: "node-a", Identity: func() (string, error) { return id, nil }}
	tlsKey, csr, err := nodeca.NewRequest("node-a")
	if err != nil {
		t.Fatal(err)
	}
	j, err := up.JoinRetrying(ctx, tlsKey, csr, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if names := j.Cert.Leaf.DNSNames; len(names) != 1 || names[0] != "node-a" {
		t.Errorf("the node's certificate names %v, want node-a", names)
	}
	ca, _ := nodeca.New(key.NodeCASeed())
	if _, err := j.Cert.Leaf.Verify(x509.VerifyOptions{Roots: ca.ClientConfig("node-a").RootCAs, DNSName: "node-a"}); err != nil {
		t.Errorf("the node's certificate does not verify as node-a: %v", err)
	}
	v := j.Verifier
	now := time.Now()
	if _, _, err := v.VerifyRequest(key.NodeSigner().MintRequest("node-a", "GET", "/node/v1/x", now), "node-a", "GET", "/node/v1/x", now); err != nil {
		t.Errorf("the joined key does not check the server's requests: %v", err)
	}
	tok, err := up.AgentToken(ctx, "mine", 1)
	if err != nil {
		t.Fatal(err)
	}
	if sc, err := key.Verify(tok, now); err != nil || sc.Agent != "mine" || sc.Attempt != 1 {
		t.Errorf("the attempt's token: %+v %v", sc, err)
	}
	var ue *nodeapi.UpstreamError
	if _, err := up.AgentToken(ctx, "theirs", 1); !errors.As(err, &ue) || ue.Code != http.StatusForbidden {
		t.Errorf("another node's agent: %v, want 403", err)
	}
	as := &nodeapi.Upstream{Server: ts.URL, Node: "node-b", Identity: up.Identity}
	done := make(chan error, 1)
	go func() {
		_, err := as.JoinRetrying(ctx, tlsKey, csr, slog.New(slog.NewTextHandler(io.Discard, nil)))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.As(err, &ue) || ue.Code != http.StatusForbidden {
			t.Errorf("joining as another node: %v, want 403", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("joining as another node was retried instead of refused")
	}
}
