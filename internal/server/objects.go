package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/guestnet"
	"github.com/hvkube/hvkube/internal/hostpath"
	"github.com/hvkube/hvkube/internal/mcptools"
	"github.com/hvkube/hvkube/internal/secrets"
	"github.com/hvkube/hvkube/internal/store"
)

// resourceKind resolves the {resource} path segment.
func resourceKind(r *http.Request) (api.KindInfo, error) {
	res := r.PathValue("resource")
	k, ok := api.LookupKind(res)
	if !ok || k.Kind == api.KindEvent {
		return api.KindInfo{}, fmt.Errorf("unknown resource type %q: %w", res, api.ErrNotFound)
	}
	return k, nil
}

// List is the Kubernetes-shaped list body.
type List struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   ListMeta     `json:"metadata"`
	Items      []api.Object `json:"items"`
}

// writeRawList writes a List whose items are the store's JSON as is: no
// decoding and re-encoding of thousands of objects.
func writeRawList(w http.ResponseWriter, kind string, rv string, cont string, items []json.RawMessage) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	fmt.Fprintf(bw, `{"apiVersion":%q,"kind":%q,"metadata":{"resourceVersion":%q`, api.Version, kind, rv)
	if cont != "" {
		fmt.Fprintf(bw, `,"continue":%q`, cont)
	}
	bw.WriteString(`},"items":[`)
	for i, it := range items {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.Write(it)
	}
	bw.WriteString("]}\n")
	bw.Flush()
}

// ListMeta carries the revision a list was read at and, when the list is
// paged, the token for the next page.
type ListMeta struct {
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Continue        string `json:"continue,omitempty"`
}

// MaxListLimit bounds a list's limit parameter.
const MaxListLimit = 100000

// continueToken is the opaque continue of a paged list: where the next page
// starts. Each page is read at its own revision (the store keeps no
// history to read an older one from), as a Kubernetes list does once its
// first page's revision is compacted.
type continueToken struct {
	After string `json:"after"`
}

func encodeContinue(after string) string {
	if after == "" {
		return ""
	}
	b, _ := json.Marshal(continueToken{After: after})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(s string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	var t continueToken
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err == nil && t.After == "" {
		err = fmt.Errorf("empty")
	}
	if err == nil {
		err = api.ValidateName("continue", t.After)
	}
	if err != nil {
		return "", api.Invalid("continue", "not a continue token from this server (pass the metadata.continue of the previous page as is)")
	}
	return t.After, nil
}

// parseRV reads the resourceVersion parameter: -1 when absent or "0"
// (any revision will do).
func parseRV(r *http.Request) (string, error) {
	v := r.URL.Query().Get("resourceVersion")
	if v == "0" {
		return "", nil // as Kubernetes: any version, the current one
	}
	// resourceVersions are opaque; the store says whether it gave this
	// one out. Here only the size and the alphabet are bounded.
	if len(v) > 64 || strings.IndexFunc(v, func(c rune) bool { return c <= ' ' || c > '~' }) >= 0 {
		return "", api.Invalid("resourceVersion", "%.64q is not a resourceVersion (one from a list or an object)", v)
	}
	return v, nil
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	k, err := resourceKind(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	sel, err := api.ParseSelector(q.Get("labelSelector"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rv, err := parseRV(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if isWatch(r) {
		s.watch(w, r, k.Kind, sel, rv)
		return
	}
	pg := store.Page{Selector: sel, NotOlderThan: rv}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			s.fail(w, r, api.Invalid("limit", "%q is not a number in 1..%d", v, MaxListLimit))
			return
		}
		pg.Limit = n
	}
	if v := q.Get("continue"); v != "" {
		if pg.After, err = decodeContinue(v); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	// A list is served at the current revision, which is never older
	// than one the client saw (Kubernetes' "not older than").
	items, cur, next, err := s.opts.Store.ListRaw(r.Context(), k.Kind, pg)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if k.Kind == api.KindSecret {
		if items, err = redactRaw(items); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeRawList(w, k.Kind+"List", cur, encodeContinue(next), items)
}

// redactRaw returns the store's JSON of Secrets without their values.
func redactRaw(items []json.RawMessage) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, len(items))
	for i, it := range items {
		var sec api.Secret
		if err := json.Unmarshal(it, &sec); err != nil {
			return nil, fmt.Errorf("a stored Secret: %w", err)
		}
		b, err := json.Marshal(secrets.Redacted(&sec))
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// scaleTries bounds scale's retries when a controller writes the pool
// between its read and its write.
const scaleTries = 5

// setReplicas sets a pool's replicas: a read, then a write conditioned on it, tried
// again if the pool changed in between.
func (s *Server) setReplicas(ctx context.Context, name string, n int) (api.Object, error) {
	var err error
	for range scaleTries {
		var cur, out api.Object
		if cur, err = s.opts.Store.Get(ctx, api.KindSandboxPool, name); err != nil {
			return nil, err
		}
		p := cur.(*api.SandboxPool)
		old := p.Spec.Replicas
		p.Spec.Replicas = n
		if err := api.Validate(p); err != nil {
			var fe *api.FieldError
			if errors.As(err, &fe) && fe.Field == "spec.minReady" {
				return nil, api.Invalid("replicas", "%d is less than spec.minReady (%d)", n, p.Spec.MinReady)
			}
			if errors.As(err, &fe) && fe.Field == "spec.replicas" {
				return nil, api.Invalid("replicas", "%s", fe.Detail)
			}
			return nil, err
		}
		out, _, err = s.opts.Store.Update(ctx, p)
		if errors.Is(err, api.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if old != n {
			if err := s.opts.Store.RecordEvent(ctx, out, api.EventNormal, "Scaled", fmt.Sprintf("replicas %d -> %d", old, n)); err != nil {
				s.log.Warn("record event", "pool", name, "err", err)
			}
		}
		return out, nil
	}
	return nil, err
}

func isWatch(r *http.Request) bool {
	v := r.URL.Query().Get("watch")
	return v == "true" || v == "1"
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	k, err := resourceKind(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	o, err := s.opts.Store.Get(r.Context(), k.Kind, r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// decodeFor reads the body as one object of kind k, defaulted and validated,
// with its status cleared: clients do not write status.
func (s *Server) decodeFor(w http.ResponseWriter, r *http.Request, k api.KindInfo) (api.Object, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, err
	}
	o, err := api.DecodeOne(body, api.DecodeOptions{AgentShortForm: k.Kind == api.KindAgent})
	if err != nil {
		return nil, err
	}
	if got := o.GetTypeMeta().Kind; got != k.Kind {
		return nil, api.Invalid("kind", "%s does not belong at /api/v1/%s (want %s)", got, k.Plural, k.Kind)
	}
	if sec, ok := o.(*api.Secret); ok {
		if s.opts.Sealer == nil {
			return nil, fmt.Errorf("this server keeps no Secrets: it has no key to seal them with: %w", api.ErrUnsupported)
		}
		// What is stored of the values, the server writes.
		sec.Spec.Sealed, sec.Spec.Keys = "", nil
	}
	if err := s.admit(o); err != nil {
		return nil, err
	}
	return o, nil
}

// admit readies a new or applied object for the store: status cleared,
// defaults set, an agent's run finalizer added, validated, host paths
// checked. A host path in this server's own syntax must lie under its
// allowed roots; one in another OS's syntax (C:\x on Linux) is stored as it
// is, for the node that would use it to check (nothing on this host can
// use it, and a node of the other kind may).
func (s *Server) admit(o api.Object) error {
	clearStatus(o)
	api.Default(o)
	if a, ok := o.(*api.Agent); ok && !slices.Contains(a.Metadata.Finalizers, api.FinalizerRun) {
		// Set at creation, so that deleting an agent always waits for its
		// run to stop; an apply of the same manifest keeps it.
		a.Metadata.Finalizers = append(a.Metadata.Finalizers, api.FinalizerRun)
	}
	if err := api.Validate(o); err != nil {
		return err
	}
	for _, hp := range api.HostPaths(o) {
		if !hostpath.Native(hp.Path) {
			continue
		}
		if err := s.opts.AllowedRoots.Check(hp.Field, hp.Path); err != nil {
			return err
		}
	}
	if err := checkMCPTools(o); err != nil {
		return err
	}
	return checkEgress(o)
}

// checkMCPTools checks that an agent's spec.mcp.tools names tools of the
// server's MCP endpoint: the list limits what the agent's token may call
// (mcp.go), and a misspelt name would refuse a tool the agent was meant
// to have.
func checkMCPTools(o api.Object) error {
	a, ok := o.(*api.Agent)
	if !ok || a.Spec.MCP == nil {
		return nil
	}
	for i, name := range a.Spec.MCP.Tools {
		if !slices.Contains(mcptools.ToolNames, name) {
			return api.Invalid(fmt.Sprintf("spec.mcp.tools[%d]", i), "%q is not a tool of the MCP server (docs/mcp.md lists them)", name)
		}
	}
	return nil
}

// checkEgress parses the egress rules of o's networks as the guest
// network will, so that a bad rule is a 400 naming it.
func checkEgress(o api.Object) error {
	var field string
	var n api.Network
	switch o := o.(type) {
	case *api.Template:
		field, n = "spec.network", o.Spec.Network
	case *api.Sandbox:
		field, n = "spec.network", o.Spec.Network
	case *api.SandboxPool:
		field, n = "spec.template.spec.network", o.Spec.Template.Spec.Network
	default:
		return nil
	}
	_, err := guestnet.ParsePolicy(n.Egress.Allow, n.Egress.Deny)
	var re *guestnet.RuleError
	if errors.As(err, &re) {
		return api.Invalid(field+".egress."+re.Field(), "%v", re.Err)
	}
	return err
}

func clearStatus(o api.Object) {
	switch o := o.(type) {
	case *api.Template:
		o.Status = api.TemplateStatus{}
	case *api.Sandbox:
		o.Status = api.SandboxStatus{}
	case *api.SandboxPool:
		o.Status = api.SandboxPoolStatus{}
	case *api.Agent:
		o.Status = api.AgentStatus{}
	case *api.DisplayService:
		o.Status = api.DisplayServiceStatus{}
	}
	o.GetMeta().DeletionTimestamp = nil
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	k, err := resourceKind(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	o, err := s.decodeFor(w, r, k)
	if err != nil {
		s.failBody(w, r, err)
		return
	}
	o.GetMeta().ResourceVersion = ""
	if sec, ok := o.(*api.Secret); ok {
		if err := s.opts.Sealer.Prepare(sec, nil); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	out, err := s.opts.Store.Create(r.Context(), o)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

// ApplyResultHeader tells a PUT's caller whether the object was created,
// configured or unchanged.
const ApplyResultHeader = "Hvkube-Apply-Result"

func (s *Server) put(w http.ResponseWriter, r *http.Request) {
	k, err := resourceKind(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	o, err := s.decodeFor(w, r, k)
	if err != nil {
		s.failBody(w, r, err)
		return
	}
	if name := r.PathValue("name"); o.GetMeta().Name != name {
		s.fail(w, r, api.Invalid("metadata.name", "%q does not match the name in the URL (%q)", o.GetMeta().Name, name))
		return
	}
	if sec, ok := o.(*api.Secret); ok {
		var prev *api.Secret
		cur, err := s.opts.Store.Get(r.Context(), api.KindSecret, sec.Metadata.Name)
		switch {
		case err == nil:
			prev = cur.(*api.Secret)
		case !errors.Is(err, api.ErrNotFound):
			s.fail(w, r, err)
			return
		}
		if err := s.opts.Sealer.Prepare(sec, prev); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	out, res, err := store.Apply(r.Context(), s.opts.Store, o)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set(ApplyResultHeader, string(res))
	code := http.StatusOK
	if res == store.Created {
		code = http.StatusCreated
	}
	writeJSON(w, code, out)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	k, err := resourceKind(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, deleted, err := s.opts.Store.Delete(r.Context(), k.Kind, r.PathValue("name"), store.DeleteOptions{ResourceVersion: r.URL.Query().Get("resourceVersion")})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	code := http.StatusOK
	if !deleted {
		code = http.StatusAccepted // finalizers hold it until its VM is gone
	}
	writeJSON(w, code, out)
}

// ScaleRequest is the body of PATCH /sandboxpools/{name}/scale: either
// {"replicas": N} or a Kubernetes Scale {"spec": {"replicas": N}}.
type ScaleRequest struct {
	Replicas *int `json:"replicas,omitempty"`
	Spec     *struct {
		Replicas *int `json:"replicas,omitempty"`
	} `json:"spec,omitempty"`
}

func (s *Server) scale(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		s.failBody(w, r, err)
		return
	}
	if err := api.CheckJSON(body); err != nil {
		s.fail(w, r, err)
		return
	}
	var req ScaleRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		s.fail(w, r, api.Invalid("replicas", "want {\"replicas\": N}: %v", err))
		return
	}
	n := req.Replicas
	if n == nil && req.Spec != nil {
		n = req.Spec.Replicas
	}
	if n == nil {
		s.fail(w, r, api.Invalid("replicas", "required"))
		return
	}
	out, err := s.setReplicas(r.Context(), r.PathValue("name"), *n)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// AgentResult is GET /agents/{name}/result, in seed 000's shape.
type AgentResult struct {
	Name            string          `json:"name"`
	Status          string          `json:"status"`
	Success         bool            `json:"success"`
	Output          json.RawMessage `json:"output,omitempty"`
	Artifacts       []string        `json:"artifacts"`
	Screenshots     []string        `json:"screenshots,omitempty"`
	DurationSeconds float64         `json:"duration_seconds"`
	Sandbox         string          `json:"sandbox,omitempty"`
	Attempts        int             `json:"attempts,omitempty"`
	Message         string          `json:"message,omitempty"`
}

func (s *Server) agentResult(w http.ResponseWriter, r *http.Request) {
	o, err := s.opts.Store.Get(r.Context(), api.KindAgent, r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ResultOf(o.(*api.Agent)))
}

// ResultOf shapes an agent's status as seed 000's result.
func ResultOf(a *api.Agent) AgentResult {
	phase := a.Status.Phase
	if phase == "" {
		phase = api.AgentPending
	}
	res := AgentResult{
		Name:      a.Metadata.Name,
		Status:    strings.ToLower(phase),
		Artifacts: []string{},
		Sandbox:   a.Status.Sandbox,
		Attempts:  a.Status.Attempts,
		Message:   a.Status.Message,
	}
	if rr := a.Status.Result; rr != nil {
		res.Success = rr.Success
		res.Output = rr.Output
		if rr.Artifacts != nil {
			res.Artifacts = rr.Artifacts
		}
		res.Screenshots = rr.Screenshots
		res.DurationSeconds = rr.DurationSeconds
	}
	return res
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.EventFilter{Name: q.Get("name")}
	if kind := q.Get("kind"); kind != "" {
		k, ok := api.LookupKind(kind)
		if !ok {
			s.fail(w, r, api.Invalid("kind", "unknown kind %q", kind))
			return
		}
		f.Kind = k.Kind
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100000 {
			s.fail(w, r, api.Invalid("limit", "%q is not a number in 1..100000", l))
			return
		}
		f.Limit = n
	}
	rv, err := parseRV(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if isWatch(r) {
		s.watchEvents(w, r, f, rv)
		return
	}
	if rv != "" {
		f.After, f.Limit = rv, 0
	}
	evs, err := s.opts.Store.ListEvents(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	items := make([]api.Object, len(evs))
	for i, e := range evs {
		items[i] = e
	}
	writeJSON(w, http.StatusOK, List{APIVersion: api.Version, Kind: "EventList", Items: items})
}
