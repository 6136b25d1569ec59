package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/nodeca"
)

// What a node agent (hvkube node) asks of the API servers, with its own
// identity (Options.NodeIdentity) and nothing else: when it joins, its
// serving certificate for its own name and the public key that checks
// the API servers' requests to it; and the scoped token of an attempt of
// an agent it runs (agent-token). The signing key stays
// here, so a node, or whoever takes one over, mints no token: it gets
// only what its own attempts need, and only while they run on it.
//
// These routes authorize themselves: neither the server's token nor an
// agent's scoped token reaches them, and a node's identity reaches
// nothing else.

// nodePathPrefix roots the routes of nodes.
const nodePathPrefix = "/api/v1/nodes/"

// isNodePath reports whether r is for one of the routes of nodes.
func isNodePath(r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, nodePathPrefix)
	if !ok {
		return false
	}
	_, op, ok := strings.Cut(rest, "/")
	return ok && (op == "join" || op == "agent-token" || op == "env")
}

func (s *Server) nodeRoutes() {
	s.mux.HandleFunc("POST "+nodePathPrefix+"{name}/join", s.nodeJoin)
	s.mux.HandleFunc("POST "+nodePathPrefix+"{name}/agent-token", s.nodeAgentToken)
	s.mux.HandleFunc("POST "+nodePathPrefix+"{name}/env", s.nodeEnv)
}

// nodeOf authenticates the request as node name: its bearer credential
// must be that node's identity. The answer is written on failure.
func (s *Server) nodeOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("name")
	if s.opts.NodeIdentity == nil || s.opts.ScopedKey == nil {
		refuse(w, http.StatusNotImplemented, errors.New("this server takes no nodes (it runs its own)"))
		return "", false
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="hvkube node"`)
		refuse(w, http.StatusUnauthorized, fmt.Errorf("node %s: the node's identity is required (hvkube node --identity-file)", name))
		return "", false
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	who, err := s.opts.NodeIdentity(ctx, tok)
	if errors.Is(err, api.ErrUnavailable) {
		s.log.Warn("node identity not checked", "node", name, "err", err)
		refuse(w, http.StatusServiceUnavailable, fmt.Errorf("node %s: the identity could not be checked now: %v", name, err))
		return "", false
	}
	if err != nil {
		s.log.Warn("node identity refused", "node", name, "remote", r.RemoteAddr, "err", err)
		w.Header().Set("WWW-Authenticate", `Bearer realm="hvkube node"`)
		refuse(w, http.StatusUnauthorized, fmt.Errorf("node %s: identity refused: %v", name, err))
		return "", false
	}
	if who != name {
		s.log.Warn("a node asked as another", "identity", who, "asked as", name, "remote", r.RemoteAddr)
		refuse(w, http.StatusForbidden, fmt.Errorf("this identity is node %s's: it speaks for no other node (asked as %s)", who, name))
		return "", false
	}
	return who, true
}

// nodeJoinRequest is what a node sends when it joins: the certificate
// request of the key it serves its API with (PEM).
type nodeJoinRequest struct {
	CSR string `json:"csr"`
}

// nodeJoinAnswer is what a node is given when it joins.
type nodeJoinAnswer struct {
	// APIKey is the public key (PEM) that checks the API servers'
	// requests to the node.
	APIKey string `json:"apiKey"`
	// Certificate is the node's serving certificate (PEM), for its name
	// alone, signed by the node API's authority.
	Certificate string `json:"certificate"`
}

// maxCSR bounds a certificate request.
const maxCSR = 16 << 10

func (s *Server) nodeJoin(w http.ResponseWriter, r *http.Request) {
	node, ok := s.nodeOf(w, r)
	if !ok {
		return
	}
	var req nodeJoinRequest
	if err := s.decodeStrict(w, r, &req); err != nil {
		s.failBody(w, r, err)
		return
	}
	if req.CSR == "" || len(req.CSR) > maxCSR {
		s.fail(w, r, api.Invalid("csr", "a PEM CERTIFICATE REQUEST of at most %d bytes is required", maxCSR))
		return
	}
	ca, err := s.nodeAuthority()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	cert, err := ca.Sign([]byte(req.CSR), node, time.Now())
	if err != nil {
		s.fail(w, r, api.Invalid("csr", "%v", err))
		return
	}
	s.log.Info("node joined", "node", node, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, nodeJoinAnswer{APIKey: string(s.opts.ScopedKey.NodeSigner().Verifier().PEM()), Certificate: string(cert)})
}

// nodeAuthority is the node API's authority, made from the key once.
func (s *Server) nodeAuthority() (*nodeca.CA, error) {
	s.caOnce.Do(func() { s.ca, s.caErr = nodeca.New(s.opts.ScopedKey.NodeCASeed()) })
	return s.ca, s.caErr
}

// agentTokenRequest names the attempt a node wants a token for.
type agentTokenRequest struct {
	Agent   string `json:"agent"`
	Attempt int    `json:"attempt"`
}

type agentTokenAnswer struct {
	Token   string    `json:"token"`
	Expires time.Time `json:"expires"`
}

// nodeAgentToken mints the scoped token of a running attempt of an agent
// bound to the asking node: another node's agent, an attempt that is not
// the running one, or one not yet running gets nothing.
func (s *Server) nodeAgentToken(w http.ResponseWriter, r *http.Request) {
	node, ok := s.nodeOf(w, r)
	if !ok {
		return
	}
	var req agentTokenRequest
	if err := s.decodeStrict(w, r, &req); err != nil {
		s.failBody(w, r, err)
		return
	}
	a, ok := s.attemptOn(w, r, node, req.Agent, req.Attempt, "token")
	if !ok {
		return
	}
	now := time.Now()
	ttl := agentstate.Timeout(a)
	tok := s.opts.ScopedKey.Mint(authtoken.ForAttempt(a, req.Attempt), now, ttl)
	writeJSON(w, http.StatusOK, agentTokenAnswer{Token: tok, Expires: now.Add(ttl).UTC()})
}

type envRequest struct {
	Sandbox string `json:"sandbox"`
	Agent   string `json:"agent,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
}

// nodeEnv opens the session variables of a sandbox on the asking node,
// and of the claim of it by the running attempt of an agent on it (what
// the node writes into the desktop when the sandbox starts and when the
// agent acquires it): the node holds no key and reads no Secret; it
// gets the values of its own claims, while they run, and nothing else.
func (s *Server) nodeEnv(w http.ResponseWriter, r *http.Request) {
	node, ok := s.nodeOf(w, r)
	if !ok {
		return
	}
	if s.opts.Sealer == nil {
		refuse(w, http.StatusNotImplemented, errors.New("this server keeps no Secrets"))
		return
	}
	var req envRequest
	if err := s.decodeStrict(w, r, &req); err != nil {
		s.failBody(w, r, err)
		return
	}
	if err := api.ValidateName("sandbox", req.Sandbox); err != nil {
		s.fail(w, r, err)
		return
	}
	o, err := s.opts.Store.Get(r.Context(), api.KindSandbox, req.Sandbox)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sb := o.(*api.Sandbox)
	if sb.Status.Node != node {
		refuse(w, http.StatusForbidden, fmt.Errorf("sandbox %s is on node %q, not on node %s: its variables are not yours to have", sb.Metadata.Name, sb.Status.Node, node))
		return
	}
	var a *api.Agent
	if req.Agent != "" {
		if a, ok = s.attemptOn(w, r, node, req.Agent, req.Attempt, "variables"); !ok {
			return
		}
		if a.Status.Sandbox != sb.Metadata.Name {
			refuse(w, http.StatusForbidden, fmt.Errorf("agent %s runs on sandbox %s, not on %s: its variables are not that sandbox's", a.Metadata.Name, a.Status.Sandbox, sb.Metadata.Name))
			return
		}
	}
	env, err := s.opts.Sealer.Resolve(r.Context(), s.opts.Store.Get, sb, a)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, env)
}

// attemptOn reads agent and checks that its running attempt is attempt,
// on node, on a sandbox claimed for it there: what a node gets an
// attempt's token or variables for. It answers the refusal itself
// (what: what is refused) and returns false.
func (s *Server) attemptOn(w http.ResponseWriter, r *http.Request, node, agent string, attempt int, what string) (*api.Agent, bool) {
	switch {
	case agent == "":
		s.fail(w, r, api.Invalid("agent", "required"))
		return nil, false
	case attempt < 1:
		s.fail(w, r, api.Invalid("attempt", "%d: attempts count from 1", attempt))
		return nil, false
	}
	o, err := s.opts.Store.Get(r.Context(), api.KindAgent, agent)
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	a := o.(*api.Agent)
	switch {
	case a.Status.Node != node:
		refuse(w, http.StatusForbidden, fmt.Errorf("agent %s runs on node %q, not on node %s: its %s is not yours to have", a.Metadata.Name, a.Status.Node, node, what))
		return nil, false
	case a.Status.Phase != api.AgentRunning || a.Status.Attempts != attempt || a.Status.Sandbox == "":
		refuse(w, http.StatusConflict, fmt.Errorf("agent %s is %s at attempt %d: attempt %d is not running, so it gets no %s", a.Metadata.Name, orNone(string(a.Status.Phase)), a.Status.Attempts, attempt, what))
		return nil, false
	}
	if refusal, err := s.claimedFor(r.Context(), a, node); err != nil {
		s.fail(w, r, err)
		return nil, false
	} else if refusal != nil {
		refuse(w, http.StatusForbidden, refusal)
		return nil, false
	}
	return a, true
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// claimedFor checks that a's attempt runs on a sandbox the scheduler
// claimed for it on node: the sandbox is node's, it holds a, and its
// claim (an older scheduler wrote none) names a's UID. A node writes an
// agent Running when it starts the attempt, and could write any Pending
// agent so; the claim it cannot write (deploy/admission-policy.yaml), so
// an attempt it started on no claim gets no token. The sandbox is read
// from the server's watch caches, and the store only to confirm a
// refusal. It returns why it refuses, or err when the store could not
// say.
func (s *Server) claimedFor(ctx context.Context, a *api.Agent, node string) (refusal, err error) {
	check := func(o api.Object) error {
		sb := o.(*api.Sandbox)
		switch {
		case sb.Status.Node != node:
			return fmt.Errorf("agent %s runs on sandbox %s, which is on node %q, not on node %s: its token is not yours to have", a.Metadata.Name, sb.Metadata.Name, sb.Status.Node, node)
		case sb.Status.CurrentAgent != a.Metadata.Name:
			return fmt.Errorf("sandbox %s was not claimed for agent %s (it holds %q): an attempt started on no claim gets no token", sb.Metadata.Name, a.Metadata.Name, sb.Status.CurrentAgent)
		case sb.Status.Claim != nil && sb.Status.Claim.UID != a.Metadata.UID:
			return fmt.Errorf("sandbox %s was claimed for another agent named %s (uid %s, not %s): an attempt started on no claim gets no token", sb.Metadata.Name, a.Metadata.Name, sb.Status.Claim.UID, a.Metadata.UID)
		}
		return nil
	}
	if s.opts.Cached != nil {
		if o, ok := s.opts.Cached(api.KindSandbox, a.Status.Sandbox); ok && check(o) == nil {
			return nil, nil
		}
	}
	o, err := s.opts.Store.Get(ctx, api.KindSandbox, a.Status.Sandbox)
	if errors.Is(err, api.ErrNotFound) {
		return fmt.Errorf("agent %s runs on sandbox %s, which does not exist: its token is not yours to have", a.Metadata.Name, a.Status.Sandbox), nil
	}
	if err != nil {
		return nil, err
	}
	return check(o), nil
}
