package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hvkube/hvkube/internal/agentstate"
	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/reconcile"
	"github.com/hvkube/hvkube/internal/store"
)

// Human in the loop: an agent asks a person a question (POST
// /agents/{name}/hitl), waits for the answer (GET …/hitl?wait=N), people
// see the pending questions (GET /hitl) and answer them (POST
// /hitl/{agent}/respond). A person may take a sandbox's input over (POST
// /sandboxes/{name}/control) while they act for the agent; agents' input
// is refused meanwhile. Every question, answer and take-over is an event.

// Bounds on what people and agents send.
const (
	MaxQuestion = 4096     // characters
	MaxAnswer   = 64 << 10 // bytes
	MaxHolder   = 128      // characters of a person's name
	// MaxHumanWait bounds GET …/hitl?wait=.
	MaxHumanWait = 300
)

func (s *Server) hitlRoutes() {
	m := s.mux
	m.HandleFunc("POST /api/v1/agents/{name}/hitl", s.askHuman)
	m.HandleFunc("GET /api/v1/agents/{name}/hitl", s.getHumanRequest)
	m.HandleFunc("GET /api/v1/hitl", s.listHumanRequests)
	m.HandleFunc("POST /api/v1/hitl/{agent}/respond", s.answerHuman)
	m.HandleFunc("POST /api/v1/sandboxes/{name}/control", s.control)
}

// newID returns a random identifier for a request or a take-over.
func newID() string { return strings.ToLower(rand.Text()) }

// AskRequest is the body of POST /agents/{name}/hitl.
type AskRequest struct {
	Question *string `json:"question"`
}

func (s *Server) askHuman(w http.ResponseWriter, r *http.Request) {
	var req AskRequest
	if err := s.decodeStrict(w, r, &req); err != nil {
		s.failBody(w, r, err)
		return
	}
	if req.Question == nil {
		s.fail(w, r, api.Invalid("question", "required"))
		return
	}
	hr, err := s.ask(r.Context(), r.PathValue("name"), *req.Question)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, hr)
}

// ask records agent's question for a person: the operation of POST
// …/hitl, which MCP's ask_human calls too.
func (s *Server) ask(ctx context.Context, name, question string) (*api.HumanRequest, error) {
	switch {
	case strings.TrimSpace(question) == "":
		return nil, api.Invalid("question", "required")
	case utf8.RuneCountInString(question) > MaxQuestion:
		return nil, api.Invalid("question", "%d characters: at most %d", utf8.RuneCountInString(question), MaxQuestion)
	case strings.ContainsRune(question, 0):
		return nil, api.Invalid("question", "contains a NUL byte")
	}
	now := time.Now().UTC()
	hr := &api.HumanRequest{ID: newID(), Question: question, AskedAt: now}
	out, err := reconcile.EditStatus(ctx, s.opts.Store, api.KindAgent, name, func(a *api.Agent) (bool, error) {
		switch {
		case a.Status.Phase != api.AgentRunning && a.Status.Phase != api.AgentScheduled:
			return false, fmt.Errorf("agent %s is %s: only a scheduled or running agent can ask: %w", name, orPending(a.Status.Phase), api.ErrConflict)
		case a.Status.HumanRequest.Pending():
			return false, fmt.Errorf("agent %s already waits for an answer to request %s: %w", name, a.Status.HumanRequest.ID, api.ErrConflict)
		}
		a.Status.HumanRequest = hr
		api.SetCondition(&a.Status.Conditions, api.Condition{Type: api.ConditionWaitingForHuman, Status: api.ConditionTrue, Reason: "Asked",
			Message: oneLine(hr.Question, 200), ObservedGeneration: a.Metadata.Generation}, now)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	reconcile.Event(ctx, s.opts.Store, s.log, out, api.EventNormal, "HumanRequested", fmt.Sprintf("request %s: %s", hr.ID, oneLine(hr.Question, 400)))
	return hr, nil
}

// getHumanRequest answers GET /agents/{name}/hitl[?wait=SECONDS]: the
// agent's latest request; with wait, once it is answered or the wait is
// over, whichever comes first.
func (s *Server) getHumanRequest(w http.ResponseWriter, r *http.Request) {
	wait := 0
	if v := r.URL.Query().Get("wait"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxHumanWait {
			s.fail(w, r, api.Invalid("wait", "%q is not a number of seconds in 0..%d", v, MaxHumanWait))
			return
		}
		wait = n
	}
	hr, err := s.latestRequest(r.Context(), r.PathValue("name"), time.Duration(wait)*time.Second)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, hr)
}

// latestRequest is agent name's latest request for a person, once it is
// answered or wait is over: the operation of GET …/hitl, which MCP's
// ask_human calls too.
func (s *Server) latestRequest(ctx context.Context, name string, wait time.Duration) (*api.HumanRequest, error) {
	a, err := s.agentAnswered(ctx, name, wait)
	if err != nil {
		return nil, err
	}
	if a.Status.HumanRequest == nil {
		return nil, fmt.Errorf("agent %s has asked nothing (or its attempt ended before an answer came): %w", name, api.ErrNotFound)
	}
	return a.Status.HumanRequest, nil
}

// agentAnswered returns the agent once its request is no longer pending,
// or as it is when wait runs out (or the client leaves).
func (s *Server) agentAnswered(ctx context.Context, name string, wait time.Duration) (*api.Agent, error) {
	st := s.opts.Store
	o, err := st.Get(ctx, api.KindAgent, name)
	if err != nil {
		return nil, err
	}
	a := o.(*api.Agent)
	if wait <= 0 || !a.Status.HumanRequest.Pending() {
		return a, nil
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// From the version read: an answer written since is not missed.
	wt, err := st.WatchFrom(wctx, api.KindAgent, api.Selector{}, a.Metadata.ResourceVersion)
	if err != nil {
		return a, nil // too much changed to watch from there: answer with what is known
	}
	for ev := range wt.Events() {
		if ev.Object.GetMeta().Name != name {
			continue
		}
		if ev.Type == store.Deleted {
			return nil, fmt.Errorf("agent %s was deleted: %w", name, api.ErrNotFound)
		}
		a = ev.Object.(*api.Agent)
		if !a.Status.HumanRequest.Pending() {
			return a, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if wt.Err() != nil {
		// The watch fell behind; the stored agent is the truth.
		if o, err := st.Get(ctx, api.KindAgent, name); err == nil {
			a = o.(*api.Agent)
		}
	}
	return a, nil
}

// PendingHumanRequest is one item of GET /hitl.
type PendingHumanRequest struct {
	Agent   string            `json:"agent"`
	Sandbox string            `json:"sandbox,omitempty"`
	Request *api.HumanRequest `json:"request"`
}

// HumanRequestList is the body of GET /hitl.
type HumanRequestList struct {
	APIVersion string                `json:"apiVersion"`
	Kind       string                `json:"kind"`
	Items      []PendingHumanRequest `json:"items"`
}

// listHumanRequests answers GET /hitl: the pending requests, oldest first.
func (s *Server) listHumanRequests(w http.ResponseWriter, r *http.Request) {
	items, _, err := s.opts.Store.List(r.Context(), api.KindAgent, api.Selector{})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := HumanRequestList{APIVersion: api.Version, Kind: "HumanRequestList", Items: []PendingHumanRequest{}}
	for _, it := range items {
		a := it.(*api.Agent)
		if a.Status.HumanRequest.Pending() && !agentstate.Finished(a) {
			out.Items = append(out.Items, PendingHumanRequest{Agent: a.Metadata.Name, Sandbox: a.Status.Sandbox, Request: a.Status.HumanRequest})
		}
	}
	slices.SortStableFunc(out.Items, func(a, b PendingHumanRequest) int { return a.Request.AskedAt.Compare(b.Request.AskedAt) })
	writeJSON(w, http.StatusOK, out)
}

// AnswerRequest is the body of POST /hitl/{agent}/respond.
type AnswerRequest struct {
	// ID is the request answered: an answer to a question that was
	// replaced meanwhile is refused.
	ID     string  `json:"id"`
	Answer *string `json:"answer"`
	// By names who answered.
	By string `json:"by,omitempty"`
}

func (s *Server) answerHuman(w http.ResponseWriter, r *http.Request) {
	var req AnswerRequest
	if err := s.decodeStrict(w, r, &req); err != nil {
		s.failBody(w, r, err)
		return
	}
	switch {
	case req.ID == "":
		s.fail(w, r, api.Invalid("id", "required: the id of the request answered (GET /api/v1/hitl lists them)"))
		return
	case req.Answer == nil || strings.TrimSpace(*req.Answer) == "":
		s.fail(w, r, api.Invalid("answer", "required"))
		return
	case len(*req.Answer) > MaxAnswer:
		s.fail(w, r, api.Invalid("answer", "%d bytes: at most %d", len(*req.Answer), MaxAnswer))
		return
	case strings.ContainsRune(*req.Answer, 0):
		s.fail(w, r, api.Invalid("answer", "contains a NUL byte"))
		return
	}
	if err := validPerson("by", req.By); err != nil {
		s.fail(w, r, err)
		return
	}
	by := req.By
	if by == "" {
		by = "anonymous"
	}
	name := r.PathValue("agent")
	now := time.Now().UTC()
	out, err := reconcile.EditStatus(r.Context(), s.opts.Store, api.KindAgent, name, func(a *api.Agent) (bool, error) {
		hr := a.Status.HumanRequest
		switch {
		case hr == nil:
			return false, fmt.Errorf("agent %s has asked nothing: %w", name, api.ErrNotFound)
		case hr.ID != req.ID:
			return false, fmt.Errorf("request %s is not agent %s's current request (%s): %w", req.ID, name, hr.ID, api.ErrConflict)
		case !hr.Pending():
			return false, fmt.Errorf("request %s was answered by %s already: %w", hr.ID, hr.AnsweredBy, api.ErrConflict)
		}
		hr.Answer, hr.AnsweredBy, hr.AnsweredAt = *req.Answer, by, &now
		api.SetCondition(&a.Status.Conditions, api.Condition{Type: api.ConditionWaitingForHuman, Status: api.ConditionFalse, Reason: "Answered",
			Message: "answered by " + by, ObservedGeneration: a.Metadata.Generation}, now)
		return true, nil
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	reconcile.Event(r.Context(), s.opts.Store, s.log, out, api.EventNormal, "HumanAnswered", fmt.Sprintf("request %s answered by %s", req.ID, by))
	writeJSON(w, http.StatusOK, out.Status.HumanRequest)
}

// validPerson checks a name people give themselves: bounded, one line.
func validPerson(field, v string) error {
	switch {
	case utf8.RuneCountInString(v) > MaxHolder:
		return api.Invalid(field, "%d characters: at most %d", utf8.RuneCountInString(v), MaxHolder)
	case !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return api.Invalid(field, "must be one line of printable text")
	}
	return nil
}

// ControlRequest is the body of POST /sandboxes/{name}/control.
type ControlRequest struct {
	// Action is take or release.
	Action string `json:"action"`
	// Holder names the person taking control (take).
	Holder string `json:"holder,omitempty"`
	// Agent is the agent whose request the take-over answers (take,
	// optional).
	Agent string `json:"agent,omitempty"`
	// ID is the take-over released (release).
	ID string `json:"id,omitempty"`
	// Force takes control from another holder, or releases another's.
	Force bool `json:"force,omitempty"`
}

// ControlResponse answers POST /sandboxes/{name}/control.
type ControlResponse struct {
	// Control is the sandbox's take-over after the call (null once
	// released).
	Control *api.SandboxControl `json:"control"`
	// Token is a display token that carries the take-over (take only,
	// when the server mints display tokens): with it the live view sends
	// input.
	Token string `json:"token,omitempty"`
	// Key is the take-over's secret (take only): input sent through the
	// API on the holder's behalf carries it in the X-Hvkube-Control
	// header, and POST …/display/token takes it as control. Unlike
	// control.id, it is not in the sandbox, which agents can read.
	Key string `json:"key,omitempty"`
}

// control answers POST /sandboxes/{name}/control. A take-over lasts until
// its holder releases it (or another forces it), the sandbox is reset to
// its clean snapshot, or the sandbox is deleted.
func (s *Server) control(w http.ResponseWriter, r *http.Request) {
	var req ControlRequest
	if err := s.decodeStrict(w, r, &req); err != nil {
		s.failBody(w, r, err)
		return
	}
	switch req.Action {
	case "take":
		if strings.TrimSpace(req.Holder) == "" {
			s.fail(w, r, api.Invalid("holder", "required: who takes control"))
			return
		}
		if err := validPerson("holder", req.Holder); err != nil {
			s.fail(w, r, err)
			return
		}
		if req.ID != "" {
			s.fail(w, r, api.Invalid("id", "only for release"))
			return
		}
		if req.Agent != "" {
			if err := api.ValidateName("agent", req.Agent); err != nil {
				s.fail(w, r, err)
				return
			}
			if _, err := s.opts.Store.Get(r.Context(), api.KindAgent, req.Agent); errors.Is(err, api.ErrNotFound) {
				s.fail(w, r, api.Invalid("agent", "no agent %q", req.Agent))
				return
			} else if err != nil {
				s.fail(w, r, err)
				return
			}
		}
		s.takeControl(w, r, req)
	case "release":
		if req.Holder != "" || req.Agent != "" {
			field := "holder"
			if req.Agent != "" {
				field = "agent"
			}
			s.fail(w, r, api.Invalid(field, "only for take"))
			return
		}
		if req.ID == "" && !req.Force {
			s.fail(w, r, api.Invalid("id", "required: the id of the take-over released (or force: true)"))
			return
		}
		s.releaseControl(w, r, req)
	case "":
		s.fail(w, r, api.Invalid("action", "required: take or release"))
	default:
		s.fail(w, r, api.Invalid("action", "%q: want take or release", req.Action))
	}
}

func (s *Server) takeControl(w http.ResponseWriter, r *http.Request, req ControlRequest) {
	name := r.PathValue("name")
	now := time.Now().UTC()
	c := &api.SandboxControl{ID: newID(), Holder: req.Holder, Since: now, Agent: req.Agent}
	taken, out, err := s.controlKeeper().TakeControl(r.Context(), name, *c, req.Force)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	msg := fmt.Sprintf("%s took control (take-over %s)", c.Holder, c.ID)
	if c.Agent != "" {
		msg += " for agent " + c.Agent
	}
	if taken != nil {
		msg += fmt.Sprintf(", forced from %s", taken.Holder)
	}
	reconcile.Event(r.Context(), s.opts.Store, s.log, out, api.EventNormal, "ControlTaken", msg)
	resp := ControlResponse{Control: c}
	if s.opts.ScopedKey != nil {
		resp.Key = s.opts.ScopedKey.ControlKey(name, c.ID)
	}
	w.Header().Set("Cache-Control", "no-store")
	if s.opts.ControlToken != nil {
		tok, err := s.opts.ControlToken(r.Context(), name, c.ID)
		if err != nil {
			s.log.Warn("mint a display token for a take-over", "sandbox", name, "err", err)
		}
		resp.Token = tok
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) releaseControl(w http.ResponseWriter, r *http.Request, req ControlRequest) {
	name := r.PathValue("name")
	released, out, err := s.controlKeeper().ReleaseControl(r.Context(), name, req.ID, req.Force)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if released != nil {
		msg := fmt.Sprintf("%s handed control back (take-over %s)", released.Holder, released.ID)
		if req.Force && req.ID != released.ID {
			msg = fmt.Sprintf("take-over %s of %s ended by force", released.ID, released.Holder)
		}
		reconcile.Event(r.Context(), s.opts.Store, s.log, out, api.EventNormal, "ControlReleased", msg)
	}
	writeJSON(w, http.StatusOK, ControlResponse{Control: out.Status.Control})
}

// endControl ends a sandbox's take-over because of why (a reset), if it
// has one.
func (s *Server) endControl(ctx context.Context, name, why string) {
	ended, out, err := s.controlKeeper().ReleaseControl(ctx, name, "", true)
	if err != nil || ended == nil {
		return
	}
	reconcile.Event(ctx, s.opts.Store, s.log, out, api.EventNormal, "ControlReleased", fmt.Sprintf("take-over %s of %s ended: %s", ended.ID, ended.Holder, why))
}

// controlKeeper is what keeps who holds a sandbox's input: the node that
// owns it when Sandboxes can reach it (InputControl), else the store.
func (s *Server) controlKeeper() InputControl {
	if ic, ok := s.opts.Sandboxes.(InputControl); ok {
		return ic
	}
	return storeControl{s.opts.Store}
}

// storeControl keeps take-overs in the store, for a server whose
// Sandboxes keep none.
type storeControl struct{ st store.Interface }

func (c storeControl) TakeControl(ctx context.Context, name string, ctl api.SandboxControl, force bool) (taken *api.SandboxControl, sb *api.Sandbox, err error) {
	sb, err = reconcile.EditStatus(ctx, c.st, api.KindSandbox, name, func(cur *api.Sandbox) (bool, error) {
		var err error
		taken, err = display.TakeControl(cur, ctl, force)
		return err == nil, err
	})
	return taken, sb, err
}

func (c storeControl) ReleaseControl(ctx context.Context, name, id string, force bool) (released *api.SandboxControl, sb *api.Sandbox, err error) {
	sb, err = reconcile.EditStatus(ctx, c.st, api.KindSandbox, name, func(cur *api.Sandbox) (bool, error) {
		var err error
		released, err = display.ReleaseControl(cur, id, force)
		return released != nil, err
	})
	return released, sb, err
}

// oneLine shortens s to at most n characters on one line, for events and
// condition messages.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
