package nodeapi

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/nodeca"
	"github.com/hvkube/hvkube/internal/secrets"
)

// Upstream is a node agent's way to the API servers (hvkube serve's
// routes of nodes): it proves who the node is with the node's identity,
// gets the public key that checks the API servers' requests (Join), and
// the scoped tokens of the attempts it runs (AgentToken). It holds no key
// that signs anything.
type Upstream struct {
	// Server is the API's base URL.
	Server string
	// Node is this node's name.
	Node string
	// Identity returns the node's identity, read at each use (a
	// projected service-account token is rotated by the kubelet).
	Identity func() (string, error)
	// HTTP sends the requests (a client with a 30 s timeout when nil).
	HTTP *http.Client
}

func (u *Upstream) post(ctx context.Context, op string, in, out any) error {
	id, err := u.Identity()
	if err != nil {
		return fmt.Errorf("the node's identity: %w", err)
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	target := strings.TrimSuffix(u.Server, "/") + "/api/v1/nodes/" + url.PathEscape(u.Node) + "/" + op
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, body)
	if err != nil {
		return fmt.Errorf("--server-url %q: %w", u.Server, err)
	}
	req.Header.Set("Authorization", "Bearer "+id)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := u.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("the API servers at %s: %w", u.Server, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return &UpstreamError{Code: resp.StatusCode, Msg: e.Error}
	}
	return json.Unmarshal(b, out)
}

// UpstreamError is an API server's refusal.
type UpstreamError struct {
	Code int
	Msg  string
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("the API servers answered %d: %s", e.Code, e.Msg)
}

// Joined is what a node is given when it joins.
type Joined struct {
	// Verifier checks the API servers' requests.
	Verifier authtoken.NodeVerifier
	// Cert is the node's serving certificate, for the key of its
	// request.
	Cert *tls.Certificate
}

// Join sends the certificate request of key, csr, and gets the node's
// serving certificate and the public key of the API servers' requests.
func (u *Upstream) Join(ctx context.Context, key ed25519.PrivateKey, csr []byte) (Joined, error) {
	var ans struct {
		APIKey      string `json:"apiKey"`
		Certificate string `json:"certificate"`
	}
	if err := u.post(ctx, "join", map[string]string{"csr": string(csr)}, &ans); err != nil {
		return Joined{}, err
	}
	v, err := authtoken.ParseNodeVerifier([]byte(ans.APIKey))
	if err != nil {
		return Joined{}, fmt.Errorf("the API servers' key: %w", err)
	}
	cert, err := nodeca.KeyPair([]byte(ans.Certificate), key)
	if err != nil {
		return Joined{}, fmt.Errorf("the node's certificate: %w", err)
	}
	return Joined{Verifier: v, Cert: cert}, nil
}

// JoinRetrying joins, trying again (1 s, doubling to 30 s) while the API
// servers cannot be reached or answer 5xx; a refusal (4xx) ends it.
func (u *Upstream) JoinRetrying(ctx context.Context, key ed25519.PrivateKey, csr []byte, log *slog.Logger) (Joined, error) {
	wait := time.Second
	for {
		j, err := u.Join(ctx, key, csr)
		if err == nil {
			return j, nil
		}
		var ue *UpstreamError
		if errors.As(err, &ue) && ue.Code/100 == 4 {
			return Joined{}, err
		}
		log.Warn("joining the API servers, trying again", "server", u.Server, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return Joined{}, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// ServingCert keeps what the node was given when it joined fresh: it
// joins again at half the certificate's life (and on failure, every
// minute until it works); GetCertificate answers with the latest
// certificate, and Verifier with the latest public key of the API
// servers (a new one after their key is rotated).
type ServingCert struct {
	mu   sync.Mutex
	cert *tls.Certificate
	ver  authtoken.NodeVerifier
}

// NewServingCert starts with what j holds.
func NewServingCert(j Joined) *ServingCert { return &ServingCert{cert: j.Cert, ver: j.Verifier} }

// Verifier is the API servers' public key as last given.
func (s *ServingCert) Verifier() authtoken.NodeVerifier {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ver
}

// GetCertificate is for tls.Config.
func (s *ServingCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cert, nil
}

// Renew joins again before the certificate ends, until ctx ends.
func (s *ServingCert) Renew(ctx context.Context, u *Upstream, key ed25519.PrivateKey, csr []byte, log *slog.Logger) {
	for {
		s.mu.Lock()
		leaf := s.cert.Leaf
		s.mu.Unlock()
		wait := time.Until(leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) / 2))
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(wait, time.Minute)):
		}
		j, err := u.Join(ctx, key, csr)
		if err != nil {
			log.Warn("renewing the node's certificate", "expires", leaf.NotAfter, "err", err)
			continue
		}
		s.mu.Lock()
		s.cert, s.ver = j.Cert, j.Verifier
		s.mu.Unlock()
		log.Info("renewed the node's certificate", "expires", j.Cert.Leaf.NotAfter)
	}
}

// AgentToken gets the scoped token of the running attempt attempt of
// agent, which runs on this node.
func (u *Upstream) AgentToken(ctx context.Context, agent string, attempt int) (string, error) {
	var ans struct {
		Token string `json:"token"`
	}
	if err := u.post(ctx, "agent-token", map[string]any{"agent": agent, "attempt": attempt}, &ans); err != nil {
		return "", err
	}
	return ans.Token, nil
}

// Env asks the API servers for the session variables of sandbox, and of
// the claim of it by attempt of agent when agent is not "" (they answer
// only for a sandbox on this node, and an attempt that runs on it).
func (u *Upstream) Env(ctx context.Context, sandbox, agent string, attempt int) (secrets.Env, error) {
	var ans secrets.Env
	err := u.post(ctx, "env", map[string]any{"sandbox": sandbox, "agent": agent, "attempt": attempt}, &ans)
	return ans, err
}
