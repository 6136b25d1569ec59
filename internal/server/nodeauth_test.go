package server

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/nodeca"
	"github.com/hvkube/hvkube/internal/reconcile"
)

// nodeServer is a server that takes nodes: identities minted under
// testKey; loop1 runs attempt 1 on node-a, on a sandbox claimed for it;
// loop2 attempt 2 on node-b, bound as an older scheduler did (no claim);
// loop3 and loop4 attempt 1 on node-a, started on no claim of theirs:
// loop3 on a sandbox that holds nothing, loop4 on one claimed for
// another agent of its name.
func nodeServer(t *testing.T) *testServer {
	t.Helper()
	d := &recordingDesk{}
	ts := start(t, Options{Token: "admin", ScopedKey: testKey, Sandboxes: d, Actions: display.NewActions(d),
		NodeIdentity: func(_ context.Context, tok string) (string, error) {
			if tok == "review-down" {
				return "", fmt.Errorf("%w: token review: connection refused", api.ErrUnavailable)
			}
			if !authtoken.IsNodeIdentity(tok) {
				return "", errors.New("not a node identity")
			}
			return testKey.VerifyNodeIdentity(tok, time.Now())
		}})
	for _, name := range []string{"desk", "spare", "free", "reused"} {
		sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		sb.Metadata.Name = name
		api.Default(sb)
		if _, err := ts.st.Create(context.Background(), sb); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []struct {
		agent, sandbox, node string
		attempt              int
	}{{"loop1", "desk", "node-a", 1}, {"loop2", "spare", "node-b", 2}, {"loop3", "free", "node-a", 1}, {"loop4", "reused", "node-a", 1}} {
		a := bindAgent(t, ts.st, b.agent, b.sandbox, b.attempt)
		if _, err := reconcile.UpdateStatus(context.Background(), ts.st, api.KindAgent, b.agent, func(a *api.Agent) bool {
			a.Status.Node = b.node
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := reconcile.UpdateStatus(context.Background(), ts.st, api.KindSandbox, b.sandbox, func(sb *api.Sandbox) bool {
			sb.Status.Node = b.node
			switch b.agent {
			case "loop1":
				sb.Status.Claim = &api.AgentClaim{UID: a.Metadata.UID, Attempt: 1}
			case "loop3":
				sb.Status.CurrentAgent = ""
			case "loop4":
				sb.Status.Claim = &api.AgentClaim{UID: "an-earlier-loop4", Attempt: 1}
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	return ts
}

// TestNodeGetsOnlyItsOwn is what a node taken over tries first with the
// identity it holds: speak for another node, get the token of another
// node's agent or of an attempt that does not run, reach the API as a
// client, and mint what it likes with the public key it is given. All of
// it is refused and changes nothing; what its own running attempt needs,
// it gets.
func TestNodeGetsOnlyItsOwn(t *testing.T) {
	ts := nodeServer(t)
	now := time.Now()
	idA := testKey.MintNodeIdentity("node-a", now, time.Hour)
	other := authtoken.Key(strings.Repeat("o", 32))
	before := rvOf(t, ts.st)

	// Its own running attempt: a token that reaches that attempt's
	// agent and sandbox, and nothing of node-b's.
	code, _, body := ts.doAuth(t, idA, "POST", "/api/v1/nodes/node-a/agent-token", `{"agent":"loop1","attempt":1}`)
	if code != http.StatusOK {
		t.Fatalf("own attempt's token: %d %s", code, body)
	}
	var ans agentTokenAnswer
	if err := json.Unmarshal(body, &ans); err != nil {
		t.Fatal(err)
	}
	sc, err := testKey.Verify(ans.Token, now)
	if err != nil || sc.Agent != "loop1" || sc.Attempt != 1 || sc.Sandbox != "desk" {
		t.Fatalf("the token's scope: %+v %v", sc, err)
	}
	if code, _, body := ts.doAuth(t, ans.Token, "GET", "/api/v1/sandboxes/spare", ""); code != http.StatusForbidden {
		t.Errorf("its attempt's token on node-b's sandbox: %d %s", code, body)
	}
	// An attempt bound by an older scheduler (no claim on its sandbox,
	// which holds it) gets its token too.
	idB := testKey.MintNodeIdentity("node-b", now, time.Hour)
	if code, _, body := ts.doAuth(t, idB, "POST", "/api/v1/nodes/node-b/agent-token", `{"agent":"loop2","attempt":2}`); code != http.StatusOK {
		t.Errorf("an attempt bound with no claim: %d %s", code, body)
	}

	// When it joins it gets a certificate for its own name, whatever
	// its request asks for, and the public key that checks the API
	// servers' requests, which mints none.
	_, greedy, err := nodeca.NewRequest("node-b")
	if err != nil {
		t.Fatal(err)
	}
	join, _ := json.Marshal(nodeJoinRequest{CSR: string(greedy)})
	code, _, body = ts.doAuth(t, idA, "POST", "/api/v1/nodes/node-a/join", string(join))
	if code != http.StatusOK {
		t.Fatalf("join: %d %s", code, body)
	}
	var j nodeJoinAnswer
	if err := json.Unmarshal(body, &j); err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode([]byte(j.Certificate))
	if blk == nil {
		t.Fatalf("no certificate in %s", body)
	}
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := nodeca.New(testKey.NodeCASeed())
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.ClientConfig("node-a").RootCAs, DNSName: "node-b"}); err == nil {
		t.Error("node-a was given a certificate that passes for node-b")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.ClientConfig("node-a").RootCAs, DNSName: "node-a"}); err != nil {
		t.Errorf("node-a's certificate: %v", err)
	}
	v, err := authtoken.ParseNodeVerifier([]byte(j.APIKey))
	if err != nil {
		t.Fatal(err)
	}
	const execB = "/node/v1/sandboxes/spare/exec"
	if _, _, err := v.VerifyRequest(testKey.NodeSigner().MintRequest("node-b", "POST", execB, now), "node-b", "POST", execB, now); err != nil {
		t.Errorf("the key given does not check the API servers' requests: %v", err)
	}
	if strings.Contains(j.APIKey, string(testKey)) || strings.Contains(string(body), "PRIVATE") {
		t.Error("join hands out the key")
	}

	for _, c := range []struct {
		name, tok, method, path, body string
		want                          int
	}{
		{"another node's join", idA, "POST", "/api/v1/nodes/node-b/join", string(join), http.StatusForbidden},
		{"a join with no request", idA, "POST", "/api/v1/nodes/node-a/join", `{"csr":""}`, http.StatusBadRequest},
		{"a join with junk", idA, "POST", "/api/v1/nodes/node-a/join", `{"csr":"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"}`, http.StatusBadRequest},
		{"a join with an oversized request", idA, "POST", "/api/v1/nodes/node-a/join", `{"csr":"` + strings.Repeat("A", 20000) + `"}`, http.StatusBadRequest},
		{"another node's agent, as that node", idA, "POST", "/api/v1/nodes/node-b/agent-token", `{"agent":"loop2","attempt":2}`, http.StatusForbidden},
		{"another node's agent, as itself", idA, "POST", "/api/v1/nodes/node-a/agent-token", `{"agent":"loop2","attempt":2}`, http.StatusForbidden},
		{"an attempt it started on no claim", idA, "POST", "/api/v1/nodes/node-a/agent-token", `{"agent":"loop3","attempt":1}`, http.StatusForbidden},
		{"an attempt it started on another agent's claim", idA, "POST", "/api/v1/nodes/node-a/agent-token", `{"agent":"loop4","attempt":1}`, http.StatusForbidden},
		{"an attempt not running", idA, "POST", "/api/v1/nodes/node-a/agent-token", `{"agent":"loop1","attempt":2}`, http.StatusConflict},
		{"a past attempt", idA, "POST", "/api/v1/nodes/node-a/agent-token", `{"agent":"loop1","attempt":0}`, http.StatusBadRequest},
		{"no agent", idA, "POST", "/api/v1/nodes/node-a/agent-token", `{"attempt":1}`, http.StatusBadRequest},
		{"unknown field", idA, "POST", "/api/v1/nodes/node-a/agent-token", `{"agent":"loop1","attempt":1,"ttl":"87600h"}`, http.StatusBadRequest},
		{"no such agent", idA, "POST", "/api/v1/nodes/node-a/agent-token", `{"agent":"nobody","attempt":1}`, http.StatusNotFound},
		{"an identity under another key", other.MintNodeIdentity("node-a", now, time.Hour), "POST", "/api/v1/nodes/node-a/join", string(join), http.StatusUnauthorized},
		{"an expired identity", testKey.MintNodeIdentity("node-a", now.Add(-2*time.Hour), time.Hour), "POST", "/api/v1/nodes/node-a/join", string(join), http.StatusUnauthorized},
		{"a request credential it saw", testKey.NodeSigner().MintRequest("node-a", "POST", "/api/v1/nodes/node-a/join", now), "POST", "/api/v1/nodes/node-a/join", string(join), http.StatusUnauthorized},
		{"no identity", "", "POST", "/api/v1/nodes/node-a/join", string(join), http.StatusUnauthorized},
		// The cluster could not be asked: the node tries again, it is not
		// refused for good.
		{"the review down", "review-down", "POST", "/api/v1/nodes/node-a/join", string(join), http.StatusServiceUnavailable},
		// The server's token is not a node: the routes of nodes take
		// identities only.
		{"the server's token", "admin", "POST", "/api/v1/nodes/node-a/agent-token", `{"agent":"loop1","attempt":1}`, http.StatusUnauthorized},
		// An identity reaches nothing but the routes of nodes.
		{"the API as a client", idA, "GET", "/api/v1/sandboxes", "", http.StatusUnauthorized},
		{"exec through the API", idA, "POST", "/api/v1/sandboxes/spare/exec", `{"command":["/bin/true"]}`, http.StatusUnauthorized},
		{"a node object", idA, "PUT", "/api/v1/nodes/node-b", `{"apiVersion":"hvkube.io/v1","kind":"Node","metadata":{"name":"node-b"}}`, http.StatusUnauthorized},
		{"a display token", idA, "POST", "/api/v1/sandboxes/spare/display/token", "", http.StatusUnauthorized},
	} {
		code, _, body := ts.doAuth(t, c.tok, c.method, c.path, c.body)
		if code != c.want {
			t.Errorf("%s: %s %s: %d %s, want %d", c.name, c.method, c.path, code, body, c.want)
		}
	}
	if after := rvOf(t, ts.st); after != before {
		t.Errorf("a node's requests changed the store (revision %d -> %d)", before, after)
	}
}

// TestServerTakesNoNodes: a server with no NodeIdentity (one that runs
// its own node) answers the routes of nodes with 501, whatever they carry.
func TestServerTakesNoNodes(t *testing.T) {
	ts, _ := scopeServer(t, "admin")
	idA := testKey.MintNodeIdentity("node-a", time.Now(), time.Hour)
	for _, tok := range []string{idA, "admin"} {
		if code, _, body := ts.doAuth(t, tok, "POST", "/api/v1/nodes/node-a/join", ""); code != http.StatusNotImplemented {
			t.Errorf("join: %d %s, want 501", code, body)
		}
	}
}
