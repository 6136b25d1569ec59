package nodeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/authtoken"
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

// Join gets the public key of the API servers' requests.
func (u *Upstream) Join(ctx context.Context) (authtoken.NodeVerifier, error) {
	var ans struct {
		APIKey string `json:"apiKey"`
	}
	if err := u.post(ctx, "join", nil, &ans); err != nil {
		return authtoken.NodeVerifier{}, err
	}
	v, err := authtoken.ParseNodeVerifier([]byte(ans.APIKey))
	if err != nil {
		return authtoken.NodeVerifier{}, fmt.Errorf("the API servers' key: %w", err)
	}
	return v, nil
}

// JoinRetrying joins, trying again (1 s, doubling to 30 s) while the API
// servers cannot be reached or answer 5xx; a refusal (4xx) ends it.
func (u *Upstream) JoinRetrying(ctx context.Context, log *slog.Logger) (authtoken.NodeVerifier, error) {
	wait := time.Second
	for {
		v, err := u.Join(ctx)
		if err == nil {
			return v, nil
		}
		var ue *UpstreamError
		if errors.As(err, &ue) && ue.Code/100 == 4 {
			return authtoken.NodeVerifier{}, err
		}
		log.Warn("joining the API servers, trying again", "server", u.Server, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return authtoken.NodeVerifier{}, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
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
