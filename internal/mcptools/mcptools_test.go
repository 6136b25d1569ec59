package mcptools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/mcptools"
)

// fakeDesktops is a fake of mcptools.Desktops: objects in a map, actions
// and completions recorded, questions answered by a script. What the tools
// let through, and how they word refusals, is under test; the server's
// Desktops is tested with the server.
type fakeDesktops struct {
	mu          sync.Mutex // guards the following fields
	objs        map[string]api.Object
	actions     []string // "sandbox:action"
	completions map[string]mcptools.Completion
	asked       []string
	// answer answers AskHuman; nil: nobody answers in time.
	answer func(question string) (string, error)
	// onCreate runs (unlocked) after an object is created.
	onCreate func(o api.Object)
}

func newFake() *fakeDesktops {
	return &fakeDesktops{objs: map[string]api.Object{}, completions: map[string]mcptools.Completion{}}
}

func (f *fakeDesktops) put(o api.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.objs[o.GetTypeMeta().Kind+"/"+o.GetMeta().Name] = api.DeepCopy(o)
}

func (f *fakeDesktops) update(kind, name string, fn func(api.Object)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.objs[kind+"/"+name])
}

func (f *fakeDesktops) Get(_ context.Context, kind, name string) (api.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.objs[kind+"/"+name]
	if !ok {
		return nil, fmt.Errorf("%s %s not found: %w", kind, name, api.ErrNotFound)
	}
	return api.DeepCopy(o), nil
}

func (f *fakeDesktops) List(_ context.Context, kind string) ([]api.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Object
	for _, o := range f.objs {
		if o.GetTypeMeta().Kind == kind {
			out = append(out, api.DeepCopy(o))
		}
	}
	return out, nil
}

func (f *fakeDesktops) Create(_ context.Context, o api.Object) (api.Object, error) {
	f.mu.Lock()
	key := o.GetTypeMeta().Kind + "/" + o.GetMeta().Name
	if _, ok := f.objs[key]; ok {
		f.mu.Unlock()
		return nil, fmt.Errorf("%s exists: %w", key, api.ErrAlreadyExists)
	}
	f.objs[key] = api.DeepCopy(o)
	hook := f.onCreate
	f.mu.Unlock()
	if hook != nil {
		hook(o)
	}
	return o, nil
}

func (f *fakeDesktops) Delete(_ context.Context, kind, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.objs[kind+"/"+name]; !ok {
		return fmt.Errorf("%s %s not found: %w", kind, name, api.ErrNotFound)
	}
	delete(f.objs, kind+"/"+name)
	return nil
}

func (f *fakeDesktops) has(kind, name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.objs[kind+"/"+name]
	return ok
}

func (f *fakeDesktops) Do(_ context.Context, sandbox string, a api.Action, width int) (mcptools.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions = append(f.actions, sandbox+":"+a.Action)
	switch a.Action {
	case "screenshot":
		return mcptools.Result{Image: []byte("png"), ContentType: "image/png"}, nil
	case "cursor_position":
		return mcptools.Result{Coordinate: []int{7, 8}}, nil
	case "key":
		if a.Text == "warp" {
			return mcptools.Result{}, api.Invalid("text", "unknown key %q", a.Text)
		}
	}
	return mcptools.Result{}, nil
}

func (f *fakeDesktops) did() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.actions...)
}

func (f *fakeDesktops) Complete(_ context.Context, agent string, c mcptools.Completion) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.completions[agent] = c
	return nil
}

func (f *fakeDesktops) AskHuman(_ context.Context, agent, question string, wait time.Duration) (string, error) {
	f.mu.Lock()
	f.asked = append(f.asked, fmt.Sprintf("%s:%s:%s", agent, question, wait))
	answer := f.answer
	f.mu.Unlock()
	if answer == nil {
		return "", mcptools.ErrNoAnswer
	}
	return answer(question)
}

func sandbox(name, agent string) *api.Sandbox {
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = name
	sb.Metadata.Labels = map[string]string{"pool": "web"}
	sb.Status.Phase = api.SandboxRunning
	sb.Status.CurrentAgent = agent
	return sb
}

func agent(name string, labels map[string]string) *api.Agent {
	a := &api.Agent{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindAgent}}
	a.Metadata.Name = name
	a.Metadata.Labels = labels
	a.Spec.Type = "mcp-agent"
	return a
}

// session serves the tools over f to an in-memory client; the caller's
// scope is whatever *scope holds at the call.
func session(t *testing.T, f *fakeDesktops, scope *mcptools.Scope) *mcp.ClientSession {
	t.Helper()
	return sessionOver(t, f, scope)
}

// call calls a tool and returns its text (or structured output) and
// whether it is a tool error. A protocol error fails the test, except
// for arguments the input schema refuses, which read as tool errors.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		if strings.Contains(err.Error(), "validating") {
			return err.Error(), true
		}
		t.Fatalf("%s: protocol error %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			b.WriteString(c.Text)
		case *mcp.ImageContent:
			b.WriteString("image:" + c.MIMEType)
		}
	}
	if res.StructuredContent != nil && b.Len() == 0 {
		j, _ := json.Marshal(res.StructuredContent)
		b.Write(j)
	}
	return b.String(), res.IsError
}

func TestScope(t *testing.T) {
	f := newFake()
	f.put(sandbox("sb1", "a1"))
	f.put(sandbox("sb2", "a2"))
	f.put(agent("a1", nil))
	var scope mcptools.Scope
	cs := session(t, f, &scope)

	type want struct {
		ok   bool
		text string // part of the answer
	}
	check := func(name string, args map[string]any, w want) {
		t.Helper()
		got, isErr := call(t, cs, name, args)
		if isErr == w.ok || !strings.Contains(got, w.text) {
			t.Errorf("%s %v with scope %+v: %q (error %v), want ok=%v containing %q", name, args, scope, got, isErr, w.ok, w.text)
		}
	}

	// Unrestricted: any sandbox, named.
	scope = mcptools.Scope{}
	check("screenshot", map[string]any{"sandbox": "sb2"}, want{true, "image:image/png"})
	check("screenshot", nil, want{false, "invalid sandbox: required"})
	check("left_click", map[string]any{"sandbox": "Not_A_Name"}, want{false, "sandbox"})
	check("list_sandboxes", nil, want{true, `"sb2"`})

	// Restricted without Check: its own sandbox while its agent holds it.
	scope = mcptools.Scope{Sandbox: "sb1", Agent: "a1", Restricted: true}
	check("screenshot", nil, want{true, "image:"})
	check("cursor_position", nil, want{true, `[7,8]`})
	check("left_click", map[string]any{"sandbox": "sb1", "coordinate": []int{1, 2}}, want{true, "done"})
	check("left_click", map[string]any{"sandbox": "sb2"}, want{false, `reaches only sandbox "sb1", not "sb2"`})
	check("acquire_sandbox", map[string]any{"pool": "web"}, want{false, "cannot take another"})
	check("release_sandbox", map[string]any{"sandbox": "sb1"}, want{false, "cannot release"})
	if got, _ := call(t, cs, "list_sandboxes", nil); strings.Contains(got, "sb2") || !strings.Contains(got, "sb1") {
		t.Errorf("list_sandboxes of a restricted token: %s", got)
	}
	f.update(api.KindSandbox, "sb1", func(o api.Object) { o.(*api.Sandbox).Status.CurrentAgent = "a9" })
	check("screenshot", nil, want{false, "agent a1 no longer holds sandbox sb1"})
	check("list_sandboxes", nil, want{false, "no longer holds"})
	f.update(api.KindSandbox, "sb1", func(o api.Object) { o.(*api.Sandbox).Status.CurrentAgent = "a1" })

	// Restricted with Check: Check decides, per need, and the sandbox is
	// not read.
	var needs []mcptools.Need
	scope = mcptools.Scope{Sandbox: "sb1", Agent: "a1", Restricted: true, Check: func(_ context.Context, n mcptools.Need) error {
		needs = append(needs, n)
		if n == mcptools.NeedAct {
			return errors.New("a person holds the input")
		}
		return nil
	}}
	f.update(api.KindSandbox, "sb1", func(o api.Object) { o.(*api.Sandbox).Status.CurrentAgent = "a9" })
	check("screenshot", nil, want{true, "image:"})
	check("wait", map[string]any{"duration": 0}, want{true, "done"})
	check("key", map[string]any{"text": "ctrl+s"}, want{false, "forbidden: a person holds the input"})
	check("complete_task", nil, want{true, "agent a1 completed"})
	check("complete_task", map[string]any{"sandbox": "sb2"}, want{false, `reaches only sandbox "sb1"`})
	if want := []mcptools.Need{mcptools.NeedView, mcptools.NeedView, mcptools.NeedAct, mcptools.NeedAgent}; fmt.Sprint(needs) != fmt.Sprint(want) {
		t.Errorf("needs checked %v, want %v", needs, want)
	}
	if got := f.did(); strings.Join(got, " ") != "sb2:screenshot sb1:screenshot sb1:cursor_position sb1:left_click sb1:screenshot sb1:wait" {
		t.Errorf("actions that reached the desktop: %v", got)
	}
}

func TestArguments(t *testing.T) {
	f := newFake()
	f.put(sandbox("sb1", "a1"))
	scope := mcptools.Scope{}
	cs := session(t, f, &scope)
	for _, tt := range []struct {
		tool string
		args map[string]any
		text string
	}{
		{"left_click", map[string]any{"sandbox": "sb1", "coordinate": []int{1, 2, 3}}, "coordinate"},
		{"left_click", map[string]any{"sandbox": "sb1", "coordinate": []int{-1, 2}}, "coordinate"},
		{"screenshot", map[string]any{"sandbox": "sb1", "width": api.MaxScreenWidth + 1}, "width"},
		{"scroll", map[string]any{"sandbox": "sb1", "scroll_direction": "sideways"}, "scroll_direction"},
		{"zoom", map[string]any{"sandbox": "sb1", "region": []int{0, 0, 1}}, "region"},
		{"wait", map[string]any{"sandbox": "sb1", "duration": api.MaxWait + 1}, "duration"},
		{"key", map[string]any{"sandbox": "sb1", "text": "warp"}, "invalid text: unknown key"},
		{"ask_human", map[string]any{"sandbox": "sb1", "question": "  "}, "invalid question: required"},
		{"ask_human", map[string]any{"sandbox": "sb1", "question": strings.Repeat("q", mcptools.MaxQuestion+1)}, "question"},
		{"ask_human", map[string]any{"sandbox": "sb1", "question": "ok?", "timeout_seconds": 301}, "timeout_seconds"},
		{"complete_task", map[string]any{"sandbox": "sb1", "message": strings.Repeat("m", mcptools.MaxCompleteMessage+1)}, "message"},
		{"acquire_sandbox", map[string]any{"pool": "web", "timeout_seconds": -1}, "timeout_seconds"},
		{"acquire_sandbox", map[string]any{"pool": "Bad Pool"}, "pool"},
		{"acquire_sandbox", map[string]any{"pool": "web", "minutes": 100000}, "minutes"},
	} {
		got, isErr := call(t, cs, tt.tool, tt.args)
		if !isErr || !strings.Contains(got, tt.text) {
			t.Errorf("%s %v: %q (error %v), want an error naming %s", tt.tool, tt.args, got, isErr, tt.text)
		}
	}
	if got := f.did(); strings.Join(got, " ") != "sb1:key" {
		t.Errorf("only the key reached the desktop (which refused it): %v", got)
	}
	if len(f.completions) != 0 || len(f.asked) != 0 {
		t.Errorf("bad arguments completed %v or asked %v", f.completions, f.asked)
	}
}

// scheduleOnCreate makes f run every agent created on sandbox sb, as a
// scheduler would, after a short while.
func scheduleOnCreate(f *fakeDesktops, sb string) {
	f.onCreate = func(o api.Object) {
		a, ok := o.(*api.Agent)
		if !ok {
			return
		}
		time.AfterFunc(30*time.Millisecond, func() {
			f.update(api.KindAgent, a.Metadata.Name, func(o api.Object) {
				o.(*api.Agent).Status.Phase = api.AgentRunning
				o.(*api.Agent).Status.Sandbox = sb
			})
			f.update(api.KindSandbox, sb, func(o api.Object) { o.(*api.Sandbox).Status.CurrentAgent = a.Metadata.Name })
		})
	}
}

func TestAcquireRelease(t *testing.T) {
	f := newFake()
	pool := &api.SandboxPool{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandboxPool}}
	pool.Metadata.Name = "web"
	f.put(pool)
	f.put(sandbox("sb1", ""))
	scope := mcptools.Scope{}
	cs := session(t, f, &scope)

	got, isErr := call(t, cs, "release_sandbox", map[string]any{"sandbox": "sb1"})
	if !isErr || !strings.Contains(got, "not held by any agent") {
		t.Fatalf("release of a free sandbox: %q", got)
	}
	got, isErr = call(t, cs, "acquire_sandbox", map[string]any{"pool": "nopool"})
	if !isErr || !strings.Contains(got, "pool nopool") {
		t.Fatalf("acquire from a missing pool: %q", got)
	}

	scheduleOnCreate(f, "sb1")
	got, isErr = call(t, cs, "acquire_sandbox", map[string]any{"pool": "web", "minutes": 5})
	if isErr {
		t.Fatalf("acquire: %s", got)
	}
	var lease mcptools.Lease
	if err := json.Unmarshal([]byte(got), &lease); err != nil || lease.Sandbox != "sb1" || !strings.HasPrefix(lease.Agent, "mcp-") {
		t.Fatalf("lease %s: %+v %v", got, lease, err)
	}
	o, err := f.Get(context.Background(), api.KindAgent, lease.Agent)
	if err != nil {
		t.Fatal(err)
	}
	a := o.(*api.Agent)
	if a.Metadata.Labels[mcptools.LeaseLabel] == "" || a.Spec.SandboxSelector.Pool != "web" || a.Spec.Completion.TimeoutMinutes != 5 || a.Spec.Completion.Type != "mcp-done" {
		t.Fatalf("lease agent %+v", a)
	}

	// Only lease agents are released.
	f.put(agent("worker", nil))
	f.put(sandbox("sb2", "worker"))
	if got, isErr := call(t, cs, "release_sandbox", map[string]any{"sandbox": "sb2"}); !isErr || !strings.Contains(got, "acquire_sandbox did not create") {
		t.Fatalf("release of a sandbox held by another agent: %q", got)
	}
	if !f.has(api.KindAgent, "worker") {
		t.Fatal("release deleted an agent it did not create")
	}
	if got, isErr := call(t, cs, "release_sandbox", map[string]any{"sandbox": "sb1"}); isErr || !strings.Contains(got, "agent "+lease.Agent+" deleted") {
		t.Fatalf("release: %q", got)
	}
	if f.has(api.KindAgent, lease.Agent) {
		t.Fatal("the lease agent is still there")
	}

	// Nothing free in time: the lease agent goes again.
	f.onCreate = nil
	var created []string
	f.onCreate = func(o api.Object) { created = append(created, o.GetMeta().Name) }
	_, err = mcptools.Acquire(context.Background(), f, "web", 100*time.Millisecond, 0)
	if !errors.Is(err, api.ErrUnavailable) || len(created) != 1 {
		t.Fatalf("acquire with nothing free: %v (created %v)", err, created)
	}
	if f.has(api.KindAgent, created[0]) {
		t.Fatal("an acquire that timed out left its agent")
	}
}

func TestComplete(t *testing.T) {
	f := newFake()
	f.put(sandbox("sb1", "a1"))
	f.put(sandbox("free", ""))
	scope := mcptools.Scope{}
	cs := session(t, f, &scope)
	got, isErr := call(t, cs, "complete_task", map[string]any{"sandbox": "sb1", "success": false, "message": "the site was down", "output": map[string]any{"tries": 3}})
	if isErr || got != "agent a1 failed" {
		t.Fatalf("complete_task: %q", got)
	}
	c := f.completions["a1"]
	if c.Success || c.Message != "the site was down" || string(c.Output) != `{"tries":3}` {
		t.Fatalf("completion %+v", c)
	}
	if got, isErr := call(t, cs, "complete_task", map[string]any{"sandbox": "free"}); !isErr || !strings.Contains(got, "has no agent") {
		t.Fatalf("complete_task on a sandbox without an agent: %q", got)
	}
	// A caller with an agent of its own speaks for it.
	scope = mcptools.Scope{Agent: "mine", Sandbox: "sb1"}
	if got, isErr := call(t, cs, "complete_task", nil); isErr || got != "agent mine completed" {
		t.Fatalf("complete_task for the caller's agent: %q", got)
	}
}

func TestAskHumanTool(t *testing.T) {
	f := newFake()
	f.put(sandbox("sb1", "a1"))
	scope := mcptools.Scope{}
	cs := session(t, f, &scope)
	got, isErr := call(t, cs, "ask_human", map[string]any{"sandbox": "sb1", "question": "Which account?", "timeout_seconds": 2})
	if !isErr || !strings.Contains(got, "nobody answered within 2s; the question stays pending") {
		t.Fatalf("ask_human without an answer: %q", got)
	}
	f.answer = func(q string) (string, error) { return "the second", nil }
	got, isErr = call(t, cs, "ask_human", map[string]any{"sandbox": "sb1", "question": "Which account?"})
	if isErr || !strings.Contains(got, "the second") {
		t.Fatalf("ask_human answered: %q", got)
	}
	if want := "a1:Which account?:2s a1:Which account?:2m0s"; strings.Join(f.asked, " ") != want {
		t.Fatalf("asked %v, want %s (the default wait is %s)", f.asked, want, mcptools.DefaultAskWait)
	}
}

// fakeHumans is a fake of the human-in-the-loop API: one agent's latest
// request, and an answer that arrives on the poll numbered answerOn.
type fakeHumans struct {
	mu       sync.Mutex
	cur      *api.HumanRequest
	asks     int
	polls    []time.Duration
	answerOn int // 0: never
	replace  bool
}

func (h *fakeHumans) Ask(_ context.Context, _, question string) (*api.HumanRequest, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asks++
	if h.cur.Pending() {
		return nil, fmt.Errorf("a question is pending: %w", api.ErrConflict)
	}
	h.cur = &api.HumanRequest{ID: fmt.Sprint("q", h.asks), Question: question}
	c := *h.cur
	return &c, nil
}

func (h *fakeHumans) Latest(ctx context.Context, _ string, wait time.Duration) (*api.HumanRequest, error) {
	h.mu.Lock()
	h.polls = append(h.polls, wait)
	n := len(h.polls)
	h.mu.Unlock()
	if wait > 0 {
		// A fraction of the wait the server would block for: the poll
		// found nothing new.
		select {
		case <-time.After(wait / 20):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.replace && n > 1 {
		h.cur = &api.HumanRequest{ID: "other", Question: "something else?"}
	}
	if n == h.answerOn {
		now := time.Now()
		h.cur.Answer, h.cur.AnsweredAt = "yes", &now
	}
	c := *h.cur
	return &c, nil
}

func TestAskOver(t *testing.T) {
	ctx := context.Background()

	// No answer within the wait: ErrNoAnswer, the question stays pending,
	// and every poll asks the server for whole seconds.
	h := &fakeHumans{}
	_, err := mcptools.AskOver(ctx, h, "a1", "ok?", 300*time.Millisecond)
	if !errors.Is(err, mcptools.ErrNoAnswer) || !h.cur.Pending() || h.asks != 1 {
		t.Fatalf("unanswered: %v (pending %v, asked %d times)", err, h.cur.Pending(), h.asks)
	}
	for _, p := range h.polls {
		if p < time.Second || p%time.Second != 0 {
			t.Fatalf("polled with wait %v: the API waits whole seconds", p)
		}
	}

	// Asking the pending question again waits for it rather than asking
	// twice; the answer comes on a later poll.
	h.answerOn = len(h.polls) + 3
	ans, err := mcptools.AskOver(ctx, h, "a1", "ok?", 10*time.Second)
	if err != nil || ans != "yes" || h.asks != 2 || h.cur.ID != "q1" {
		t.Fatalf("asked again: %q %v (asked %d, request %s)", ans, err, h.asks, h.cur.ID)
	}

	// Another question pending: a conflict, and nothing is asked.
	h = &fakeHumans{cur: &api.HumanRequest{ID: "q0", Question: "other?"}}
	if _, err := mcptools.AskOver(ctx, h, "a1", "ok?", time.Second); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("with another question pending: %v", err)
	}

	// Replaced while waiting.
	h = &fakeHumans{replace: true}
	if _, err := mcptools.AskOver(ctx, h, "a1", "ok?", 5*time.Second); !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("replaced: %v", err)
	}

	// The caller gives up.
	h = &fakeHumans{}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := mcptools.AskOver(cctx, h, "a1", "ok?", time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled: %v", err)
	}
}
