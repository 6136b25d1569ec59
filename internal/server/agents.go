package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"time"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/reconcile"
)

// Agents serves what a node keeps of the agents it ran: their log and the
// files of their latest attempt (screenshots, artifacts).
type Agents interface {
	// AgentFile opens the file rel (such as "agent.log" or
	// "artifacts/out.txt") of the agent's latest attempt.
	AgentFile(ctx context.Context, agent, rel string) (io.ReadCloser, error)
}

func (s *Server) agentRoutes() {
	m := s.mux
	m.HandleFunc("POST /api/v1/agents/{name}/complete", s.completeAgent)
	m.HandleFunc("POST /api/v1/agents/{name}/heartbeat", s.heartbeatAgent)
	m.HandleFunc("GET /api/v1/agents/{name}/logs", s.agentLogs)
	m.HandleFunc("GET /api/v1/agents/{name}/files/{path...}", s.agentFile(""))
}

// CompleteRequest is the body of POST /agents/{name}/complete: how an
// external agent (mcp-agent) ends its attempt.
type CompleteRequest struct {
	// Success defaults to true.
	Success *bool           `json:"success,omitempty"`
	Output  json.RawMessage `json:"output,omitempty"`
	Message string          `json:"message,omitempty"`
}

func (s *Server) completeAgent(w http.ResponseWriter, r *http.Request) {
	var req CompleteRequest
	if !s.decodeOptional(w, r, &req) {
		return
	}
	out, err := s.completeAttempt(r.Context(), r.PathValue("name"), req, "the API")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ResultOf(out))
}

// completeAttempt ends the running attempt of agent name as req says: the
// API's complete endpoint and the MCP complete_task tool (via names which,
// in the event).
func (s *Server) completeAttempt(ctx context.Context, name string, req CompleteRequest, via string) (*api.Agent, error) {
	if len(req.Output) > 0 && !json.Valid(req.Output) {
		return nil, api.Invalid("output", "not valid JSON")
	}
	if len(req.Message) > 4096 {
		return nil, api.Invalid("message", "%d bytes: at most 4096", len(req.Message))
	}
	success := req.Success == nil || *req.Success
	now := time.Now().UTC()
	applied := false
	out, err := reconcile.UpdateStatus(ctx, s.opts.Store, api.KindAgent, name, func(a *api.Agent) bool {
		applied = a.Status.Phase == api.AgentRunning
		if !applied {
			return false
		}
		res := &api.AgentResult{Success: success, Output: req.Output}
		if a.Status.StartedAt != nil {
			res.DurationSeconds = now.Sub(*a.Status.StartedAt).Seconds()
		}
		if success {
			agentstate.Complete(a, res, now)
		} else {
			a.Status.Result = res
			msg := req.Message
			if msg == "" {
				msg = "the agent reported failure"
			}
			agentstate.FailAttempt(a, "AgentFailed", msg, now)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if !applied {
		return nil, fmt.Errorf("agent %s is %s, not Running: only a running attempt can be completed: %w", name, orPending(out.Status.Phase), api.ErrConflict)
	}
	reason, typ := "Completed", api.EventNormal
	if !success {
		reason, typ = "AgentFailed", api.EventWarning
	}
	reconcile.Event(ctx, s.opts.Store, s.log, out, typ, reason, "completed through "+via)
	return out, nil
}

// Heartbeat answers POST /agents/{name}/heartbeat: when the attempt ends
// unless another heartbeat or its completion comes first.
type Heartbeat struct {
	Agent    string    `json:"agent"`
	Attempt  int       `json:"attempt"`
	Deadline time.Time `json:"deadline"`
}

// heartbeatAgent records that the external agent of a running attempt is
// alive (spec.completion.heartbeatSeconds): one status write, or none when
// the last one is less than a quarter of the interval old.
func (s *Server) heartbeatAgent(w http.ResponseWriter, r *http.Request) {
	if !s.decodeOptional(w, r, &struct{}{}) {
		return
	}
	name := r.PathValue("name")
	now := time.Now().UTC()
	applied := false
	out, err := reconcile.UpdateStatus(r.Context(), s.opts.Store, api.KindAgent, name, func(a *api.Agent) bool {
		secs := a.Spec.Completion.HeartbeatSeconds
		applied = a.Status.Phase == api.AgentRunning && secs > 0
		if !applied {
			return false
		}
		// At most four writes an interval, however often they come.
		if hb := a.Status.HeartbeatAt; hb != nil && a.Status.StartedAt != nil && !hb.Before(*a.Status.StartedAt) &&
			now.Sub(*hb) < time.Duration(secs)*time.Second/4 {
			return false
		}
		a.Status.HeartbeatAt = &now
		return true
	})
	switch {
	case err != nil:
		s.fail(w, r, err)
		return
	case out.Spec.Completion.HeartbeatSeconds == 0:
		s.fail(w, r, api.Invalid("spec.completion.heartbeatSeconds", "agent %s takes no heartbeats (0)", name))
		return
	case !applied:
		s.fail(w, r, fmt.Errorf("agent %s is %s, not Running: only a running attempt takes heartbeats: %w", name, orPending(out.Status.Phase), api.ErrConflict))
		return
	}
	deadline, _, _ := agentstate.MCPDeadline(out, now)
	writeJSON(w, http.StatusOK, Heartbeat{Agent: name, Attempt: out.Status.Attempts, Deadline: deadline})
}

func orPending(phase string) string {
	if phase == "" {
		return api.AgentPending
	}
	return phase
}

// agentFile serves a file of the agent's latest attempt: fixed (the log),
// or the {path} of the request.
func (s *Server) agentFile(fixed string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if _, err := s.opts.Store.Get(r.Context(), api.KindAgent, name); err != nil {
			s.fail(w, r, err)
			return
		}
		if s.opts.Agents == nil {
			writeError(w, http.StatusNotImplemented, errors.New("this server runs no agents (it has no VM backend)"))
			return
		}
		rel := fixed
		if rel == "" {
			rel = r.PathValue("path")
			// Checked here as well as by the node, so that no node sees a
			// name that could not be a file of the attempt.
			if err := api.ValidateRelPath("path", rel); err != nil {
				s.fail(w, r, err)
				return
			}
		}
		f, err := s.opts.Agents.AgentFile(r.Context(), name, rel)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		defer f.Close()
		ct := mime.TypeByExtension(path.Ext(rel))
		if path.Ext(rel) == ".webm" {
			ct = "video/webm" // a screen recording; some hosts' mime.types say audio/webm
		}
		if ct == "" || rel == "agent.log" {
			ct = "text/plain; charset=utf-8"
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		disposition := mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(rel)})
		if disposition == "" {
			disposition = "attachment"
		}
		w.Header().Set("Content-Disposition", disposition)
		io.Copy(w, f)
	}
}
