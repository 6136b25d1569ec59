package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/store"
	"github.com/hvkube/hvkube/internal/testwait"
)

// runningAgent creates agent name and records it running on sandbox, as
// the node does.
func runningAgent(t *testing.T, ts *testServer, name, sandbox string) {
	t.Helper()
	code, _, body := ts.do(t, "POST", "/api/v1/agents", "application/json",
		fmt.Sprintf(`{"name":%q,"sandboxName":%q,"type":"mcp-agent","completion":{"type":"mcp-done"}}`, name, sandbox))
	if code != http.StatusCreated {
		t.Fatalf("create agent: %d %s", code, body)
	}
	setAgentPhase(t, ts, name, api.AgentRunning, sandbox)
}

func setAgentPhase(t *testing.T, ts *testServer, name, phase, sandbox string) {
	t.Helper()
	o, err := ts.st.Get(context.Background(), api.KindAgent, name)
	if err != nil {
		t.Fatal(err)
	}
	a := o.(*api.Agent)
	now := time.Now()
	a.Status.Phase, a.Status.Sandbox, a.Status.Attempts = phase, sandbox, max(a.Status.Attempts, 1)
	a.Status.StartedAt = &now
	if phase == api.AgentCompleted {
		a.Status.CompletedAt = &now
	}
	if _, err := ts.st.UpdateStatus(context.Background(), a); err != nil {
		t.Fatal(err)
	}
}

func (ts *testServer) agent(t *testing.T, name string) *api.Agent {
	t.Helper()
	o, err := ts.st.Get(context.Background(), api.KindAgent, name)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*api.Agent)
}

func (ts *testServer) reasons(t *testing.T, kind, name string) []string {
	t.Helper()
	evs, err := ts.st.ListEvents(context.Background(), store.EventFilter{Kind: kind, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out
}

// TestHumanInTheLoop drives one question through the API: asked, listed,
// a waiting reader woken by the answer, the condition and the events.
func TestHumanInTheLoop(t *testing.T) {
	ts := start(t, Options{})
	runningAgent(t, ts, "booker", "desk-1")

	code, _, body := ts.do(t, "POST", "/api/v1/agents/booker/hitl", "application/json", `{"question":"Which seat, window or aisle?"}`)
	if code != http.StatusCreated {
		t.Fatalf("ask: %d %s", code, body)
	}
	var asked api.HumanRequest
	json.Unmarshal(body, &asked)
	if asked.ID == "" || asked.Question != "Which seat, window or aisle?" || asked.AskedAt.IsZero() || asked.AnsweredAt != nil {
		t.Fatalf("asked: %s", body)
	}
	c := api.FindCondition(ts.agent(t, "booker").Status.Conditions, api.ConditionWaitingForHuman)
	if c == nil || c.Status != api.ConditionTrue || c.Reason != "Asked" {
		t.Fatalf("condition after ask: %+v", c)
	}

	code, _, body = ts.do(t, "GET", "/api/v1/hitl", "", "")
	var list HumanRequestList
	json.Unmarshal(body, &list)
	if code != 200 || list.Kind != "HumanRequestList" || list.APIVersion != api.Version || len(list.Items) != 1 ||
		list.Items[0].Agent != "booker" || list.Items[0].Sandbox != "desk-1" || list.Items[0].Request.ID != asked.ID {
		t.Fatalf("list: %d %s", code, body)
	}

	// A reader waits; the answer wakes it long before its wait is over.
	type got struct {
		code int
		hr   api.HumanRequest
		took time.Duration
	}
	woke := make(chan got, 1)
	watches := ts.tap.watches(api.KindAgent)
	go func() {
		start := time.Now()
		code, _, body := ts.do(t, "GET", "/api/v1/agents/booker/hitl?wait=60", "", "")
		var hr api.HumanRequest
		json.Unmarshal(body, &hr)
		woke <- got{code, hr, time.Since(start)}
	}()
	// The reader waits once it watches the agent, having read the request
	// pending: only the answer (or its 60 s) ends its wait then.
	if !testwait.For(10*time.Second, func() bool { return ts.tap.watches(api.KindAgent) > watches || len(woke) > 0 }) {
		t.Fatal("the reader neither waited for the answer nor returned")
	}
	select {
	case g := <-woke:
		t.Fatalf("the wait returned before the answer: %+v", g)
	default:
	}
	code, _, body = ts.do(t, "POST", "/api/v1/hitl/booker/respond", "application/json",
		fmt.Sprintf(`{"id":%q,"answer":"window, please","by":"ana"}`, asked.ID))
	if code != 200 {
		t.Fatalf("respond: %d %s", code, body)
	}
	var g got
	select {
	case g = <-woke:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting reader was not woken by the answer")
	}
	if g.code != 200 || g.hr.Answer != "window, please" || g.hr.AnsweredBy != "ana" || g.hr.AnsweredAt == nil || g.hr.ID != asked.ID {
		t.Fatalf("woken with %+v", g)
	}
	if g.took > 30*time.Second {
		t.Fatalf("the wait ran out (%s) instead of ending on the answer", g.took)
	}

	c = api.FindCondition(ts.agent(t, "booker").Status.Conditions, api.ConditionWaitingForHuman)
	if c == nil || c.Status != api.ConditionFalse || c.Reason != "Answered" {
		t.Fatalf("condition after answer: %+v", c)
	}
	code, _, body = ts.do(t, "GET", "/api/v1/hitl", "", "")
	if code != 200 || !strings.Contains(string(body), `"items":[]`) {
		t.Fatalf("list after answer: %d %s", code, body)
	}
	reasons := strings.Join(ts.reasons(t, api.KindAgent, "booker"), ",")
	if !strings.Contains(reasons, "HumanRequested") || !strings.Contains(reasons, "HumanAnswered") {
		t.Fatalf("events: %s", reasons)
	}
	// Answered: a wait returns at once; a new question may be asked.
	start := time.Now()
	if code, _, _ := ts.do(t, "GET", "/api/v1/agents/booker/hitl?wait=30", "", ""); code != 200 || time.Since(start) > 10*time.Second {
		t.Fatalf("wait on an answered request: %d after %s", code, time.Since(start))
	}
	if code, _, body := ts.do(t, "POST", "/api/v1/agents/booker/hitl", "application/json", `{"question":"And a meal?"}`); code != http.StatusCreated {
		t.Fatalf("second ask: %d %s", code, body)
	}
	// A wait that runs out answers with the request still pending.
	code, _, body = ts.do(t, "GET", "/api/v1/agents/booker/hitl?wait=1", "", "")
	var pending api.HumanRequest
	json.Unmarshal(body, &pending)
	if code != 200 || pending.Question != "And a meal?" || pending.AnsweredAt != nil {
		t.Fatalf("wait that ran out: %d %s", code, body)
	}
}

// TestHumanInTheLoopBadInput: each bad request is a 4xx naming the field
// (or the conflict) and changes nothing.
func TestHumanInTheLoopBadInput(t *testing.T) {
	ts := start(t, Options{})
	runningAgent(t, ts, "asker", "desk-1")
	runningAgent(t, ts, "quiet", "desk-2")
	code, _, body := ts.do(t, "POST", "/api/v1/agents", "application/json", `{"name":"waiting","sandboxSelector":{"pool":"p"},"type":"mcp-agent"}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	code, _, body = ts.do(t, "POST", "/api/v1/agents/asker/hitl", "application/json", `{"question":"ok?"}`)
	if code != http.StatusCreated {
		t.Fatalf("ask: %d %s", code, body)
	}
	var hr api.HumanRequest
	json.Unmarshal(body, &hr)

	for _, tt := range []struct {
		name, method, path, body string
		code                     int
		field, msg               string
	}{
		{"no question", "POST", "/api/v1/agents/quiet/hitl", `{}`, 400, "question", "required"},
		{"blank question", "POST", "/api/v1/agents/quiet/hitl", `{"question":"  "}`, 400, "question", "required"},
		{"question too long", "POST", "/api/v1/agents/quiet/hitl", `{"question":"` + strings.Repeat("é", MaxQuestion+1) + `"}`, 400, "question", "at most 4096"},
		{"question not a string", "POST", "/api/v1/agents/quiet/hitl", `{"question":5}`, 400, "question", ""},
		{"unknown field", "POST", "/api/v1/agents/quiet/hitl", `{"question":"x","urgent":true}`, 400, "urgent", "unknown field"},
		{"empty body", "POST", "/api/v1/agents/quiet/hitl", ``, 400, "", "empty body"},
		{"duplicate ask", "POST", "/api/v1/agents/asker/hitl", `{"question":"again?"}`, 409, "", "already waits"},
		{"ask while pending placement", "POST", "/api/v1/agents/waiting/hitl", `{"question":"x"}`, 409, "", "only a scheduled or running agent"},
		{"ask of no agent", "POST", "/api/v1/agents/nobody/hitl", `{"question":"x"}`, 404, "", ""},
		{"wait too long", "GET", "/api/v1/agents/asker/hitl?wait=301", ``, 400, "wait", "0..300"},
		{"wait not a number", "GET", "/api/v1/agents/asker/hitl?wait=soon", ``, 400, "wait", ""},
		{"nothing asked", "GET", "/api/v1/agents/quiet/hitl", ``, 404, "", "asked nothing"},
		{"answer without id", "POST", "/api/v1/hitl/asker/respond", `{"answer":"yes"}`, 400, "id", "required"},
		{"answer missing", "POST", "/api/v1/hitl/asker/respond", `{"id":"` + hr.ID + `"}`, 400, "answer", "required"},
		{"answer too long", "POST", "/api/v1/hitl/asker/respond", `{"id":"` + hr.ID + `","answer":"` + strings.Repeat("a", MaxAnswer+1) + `"}`, 400, "answer", "at most"},
		{"answer by two lines", "POST", "/api/v1/hitl/asker/respond", `{"id":"` + hr.ID + `","answer":"y","by":"a\nb"}`, 400, "by", "one line"},
		{"answer wrong id", "POST", "/api/v1/hitl/asker/respond", `{"id":"nope","answer":"yes"}`, 409, "", "not agent asker's current request"},
		{"answer to no question", "POST", "/api/v1/hitl/quiet/respond", `{"id":"x","answer":"yes"}`, 404, "", "asked nothing"},
		{"answer to no agent", "POST", "/api/v1/hitl/nobody/respond", `{"id":"x","answer":"yes"}`, 404, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := snapshot(t, ts)
			code, _, body := ts.do(t, tt.method, tt.path, "application/json", tt.body)
			var e errorBody
			json.Unmarshal(body, &e)
			if code != tt.code || e.Field != tt.field || !strings.Contains(e.Error, tt.msg) {
				t.Fatalf("got %d %s, want %d field %q containing %q", code, body, tt.code, tt.field, tt.msg)
			}
			if after := snapshot(t, ts); after != before {
				t.Fatalf("the store changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
	// Answered twice: the second is a conflict.
	if code, _, body := ts.do(t, "POST", "/api/v1/hitl/asker/respond", "application/json", `{"id":"`+hr.ID+`","answer":"yes"}`); code != 200 {
		t.Fatalf("answer: %d %s", code, body)
	}
	code, _, body = ts.do(t, "POST", "/api/v1/hitl/asker/respond", "application/json", `{"id":"`+hr.ID+`","answer":"no"}`)
	if code != 409 || !strings.Contains(string(body), "answered by anonymous already") {
		t.Fatalf("second answer: %d %s", code, body)
	}
	if got := ts.agent(t, "asker").Status.HumanRequest.Answer; got != "yes" {
		t.Fatalf("the second answer overwrote the first: %q", got)
	}
}

// TestControl takes and hands back a sandbox's input: 409 while another
// holds it, force, release by the right id only, and the events.
func TestControl(t *testing.T) {
	ts := start(t, Options{})
	code, _, body := ts.do(t, "POST", "/api/v1/sandboxes", "application/json", `{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"desk"},"spec":{}}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	runningAgent(t, ts, "booker", "desk")
	control := func(body string) (int, ControlResponse, errorBody) {
		t.Helper()
		code, _, b := ts.do(t, "POST", "/api/v1/sandboxes/desk/control", "application/json", body)
		var cr ControlResponse
		var e errorBody
		json.Unmarshal(b, &cr)
		json.Unmarshal(b, &e)
		return code, cr, e
	}
	held := func() *api.SandboxControl {
		o, err := ts.st.Get(context.Background(), api.KindSandbox, "desk")
		if err != nil {
			t.Fatal(err)
		}
		return o.(*api.Sandbox).Status.Control
	}

	code, ana, _ := control(`{"action":"take","holder":"ana","agent":"booker"}`)
	if code != 200 || ana.Control == nil || ana.Control.ID == "" || ana.Control.Holder != "ana" || ana.Control.Agent != "booker" || ana.Control.Since.IsZero() {
		t.Fatalf("take: %d %+v", code, ana)
	}
	if h := held(); h == nil || *h != *ana.Control {
		t.Fatalf("status.control %+v, want %+v", h, ana.Control)
	}

	for _, tt := range []struct {
		name, body string
		code       int
		field, msg string
	}{
		{"taken by another", `{"action":"take","holder":"bo"}`, 409, "", "ana holds sandbox desk's input"},
		{"no action", `{"holder":"bo"}`, 400, "action", "required"},
		{"bad action", `{"action":"grab","holder":"bo"}`, 400, "action", "take or release"},
		{"no holder", `{"action":"take","force":true}`, 400, "holder", "required"},
		{"holder too long", `{"action":"take","holder":"` + strings.Repeat("x", MaxHolder+1) + `","force":true}`, 400, "holder", "at most"},
		{"unknown agent", `{"action":"take","holder":"bo","agent":"ghost","force":true}`, 400, "agent", "no agent"},
		{"bad agent name", `{"action":"take","holder":"bo","agent":"Not_A_Name","force":true}`, 400, "agent", ""},
		{"release without id", `{"action":"release"}`, 400, "id", "required"},
		{"release wrong id", `{"action":"release","id":"nope"}`, 409, "", "is not sandbox desk's"},
		{"release with holder", `{"action":"release","id":"x","holder":"bo"}`, 400, "holder", "only for take"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := snapshot(t, ts)
			code, _, e := control(tt.body)
			if code != tt.code || e.Field != tt.field || !strings.Contains(e.Error, tt.msg) {
				t.Fatalf("got %d %+v, want %d field %q containing %q", code, e, tt.code, tt.field, tt.msg)
			}
			if after := snapshot(t, ts); after != before {
				t.Fatalf("the store changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
	if code, _, _ := ts.do(t, "POST", "/api/v1/sandboxes/nowhere/control", "application/json", `{"action":"take","holder":"bo"}`); code != 404 {
		t.Fatalf("take of no sandbox: %d", code)
	}

	// Forced: a new take-over replaces ana's; hers can no longer release.
	code, bo, _ := control(`{"action":"take","holder":"bo","force":true}`)
	if code != 200 || bo.Control.ID == ana.Control.ID || bo.Control.Holder != "bo" {
		t.Fatalf("forced take: %d %+v", code, bo)
	}
	if code, _, e := control(fmt.Sprintf(`{"action":"release","id":%q}`, ana.Control.ID)); code != 409 {
		t.Fatalf("release with the replaced id: %d %+v", code, e)
	}
	code, rel, _ := control(fmt.Sprintf(`{"action":"release","id":%q}`, bo.Control.ID))
	if code != 200 || rel.Control != nil || held() != nil {
		t.Fatalf("release: %d %+v, held %+v", code, rel, held())
	}
	// Releasing what nobody holds is done already.
	before := snapshot(t, ts)
	if code, _, _ := control(fmt.Sprintf(`{"action":"release","id":%q}`, bo.Control.ID)); code != 200 || snapshot(t, ts) != before {
		t.Fatalf("second release: %d", code)
	}
	// Force releases another's.
	control(`{"action":"take","holder":"cy"}`)
	if code, rel, _ := control(`{"action":"release","force":true}`); code != 200 || rel.Control != nil || held() != nil {
		t.Fatalf("forced release: %d %+v", code, rel)
	}
	got := ts.reasons(t, api.KindSandbox, "desk")
	if n, m := count(got, "ControlTaken"), count(got, "ControlReleased"); n != 3 || m != 2 {
		t.Fatalf("events %v: %d ControlTaken, %d ControlReleased; want 3 and 2", got, n, m)
	}
}

func count(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}

// TestScopedTokenAndHITL: an agent's program asks with its own token, but
// can neither answer nor take or release its sandbox's control.
func TestScopedTokenAndHITL(t *testing.T) {
	key := authtoken.Key("0123456789abcdef0123456789abcdef")
	ts := start(t, Options{Token: "s3cret", ScopedKey: key})
	code, _, body := ts.doAuth(t, "s3cret", "POST", "/api/v1/sandboxes", `{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"desk"},"spec":{}}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	code, _, body = ts.doAuth(t, "s3cret", "POST", "/api/v1/agents", `{"name":"booker","sandboxName":"desk","type":"mcp-agent"}`)
	if code != http.StatusCreated {
		t.Fatalf("create agent: %d %s", code, body)
	}
	bindAgent(t, ts.st, "booker", "desk", 1)
	tok := attemptToken(t, ts.st, key, "booker")
	code, _, body = ts.doAuth(t, tok, "POST", "/api/v1/agents/booker/hitl", `{"question":"ok?"}`)
	if code != http.StatusCreated {
		t.Fatalf("ask with the scoped token: %d %s", code, body)
	}
	var hr api.HumanRequest
	json.Unmarshal(body, &hr)
	for _, tt := range []struct{ method, path, body string }{
		{"POST", "/api/v1/hitl/booker/respond", `{"id":"` + hr.ID + `","answer":"sure"}`},
		{"GET", "/api/v1/hitl", ``},
		{"POST", "/api/v1/sandboxes/desk/control", `{"action":"take","holder":"bot"}`},
		{"POST", "/api/v1/sandboxes/desk/control", `{"action":"release","force":true}`},
	} {
		if code, _, body := ts.doAuth(t, tok, tt.method, tt.path, tt.body); code != http.StatusForbidden {
			t.Errorf("%s %s with the scoped token: %d %s", tt.method, tt.path, code, body)
		}
	}
	if code, _, body := ts.doAuth(t, tok, "GET", "/api/v1/agents/booker/hitl", ``); code != 200 {
		t.Fatalf("read its own request: %d %s", code, body)
	}
}

// TestScopedTokenOnlyWhileHeld: an agent's token reaches its sandbox only
// while the agent holds it; afterwards the sandbox may serve another agent.
func TestScopedTokenOnlyWhileHeld(t *testing.T) {
	key := authtoken.Key("0123456789abcdef0123456789abcdef")
	ts := start(t, Options{Token: "s3cret", ScopedKey: key})
	if code, _, body := ts.doAuth(t, "s3cret", "POST", "/api/v1/sandboxes", `{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"desk"},"spec":{}}`); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	holder := func(agent string) {
		o, _ := ts.st.Get(context.Background(), api.KindSandbox, "desk")
		o.(*api.Sandbox).Status.CurrentAgent = agent
		if _, err := ts.st.UpdateStatus(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	bindAgent(t, ts.st, "booker", "desk", 1)
	tok := attemptToken(t, ts.st, key, "booker")
	holder("booker")
	if code, _, body := ts.doAuth(t, tok, "GET", "/api/v1/sandboxes/desk", ``); code != 200 {
		t.Fatalf("while the agent holds its sandbox: %d %s", code, body)
	}
	holder("someone-else")
	code, _, body := ts.doAuth(t, tok, "GET", "/api/v1/sandboxes/desk", ``)
	if code != http.StatusForbidden || !strings.Contains(string(body), "does not hold it") {
		t.Fatalf("after the agent let it go: %d %s", code, body)
	}
}

func (ts *testServer) doAuth(t *testing.T, token, method, path, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}
