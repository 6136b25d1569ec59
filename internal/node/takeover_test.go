package node

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/server"
	"github.com/hvkube/hvkube/internal/store"
)

// getCounter is a store that counts the reads of one object.
type getCounter struct {
	store.API
	mu   sync.Mutex
	gets int
}

func (g *getCounter) Get(ctx context.Context, kind, name string) (api.Object, error) {
	g.mu.Lock()
	g.gets++
	g.mu.Unlock()
	return g.API.Get(ctx, kind, name)
}

func (g *getCounter) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gets
}

// TestTakeOverAcrossReplicas checks that the node keeps who holds a
// sandbox's input: a person takes control through one API server
// replica, and the agent's input through another replica, whose watch
// caches have not brought the take-over (they are frozen from before
// it), is refused at once, by the node; the holder's input through that
// replica goes through. An agent's input through a replica that knows
// the agent and the sandbox reads nothing from the store.
func TestTakeOverAcrossReplicas(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	c.create(t, yamlObj(t, sandboxYAML("box", "  healthCheck: {intervalSeconds: 3600}\n")))
	c.create(t, yamlObj(t, "apiVersion: hvkube/v1\nkind: Agent\nmetadata: {name: helper}\nspec: {type: mcp-agent, sandboxName: box}\n"))
	var agent *api.Agent
	eventually(t, "the agent runs on the sandbox", func() (bool, string) {
		o, err := c.st.Get(ctx, api.KindAgent, "helper")
		if err != nil {
			return false, err.Error()
		}
		agent = o.(*api.Agent)
		return agent.Status.Phase == api.AgentRunning, agent.Status.Phase
	})
	eventually(t, "the node's watch shows the sandbox running for it", func() (bool, string) {
		o, ok := c.nd.cache(api.KindSandbox).Get("box")
		if !ok {
			return false, "not in the watch"
		}
		sb := o.(*api.Sandbox)
		return sb.Status.Phase == api.SandboxRunning && sb.Status.CurrentAgent == "helper", sb.Status.Phase
	})

	key := authtoken.Key([]byte(strings.Repeat("k", 32)))
	const admin = "admin-token"
	agentToken := key.Mint(authtoken.ForAttempt(agent, agent.Status.Attempts), time.Now(), time.Hour)
	replica := func(st store.API, cached func(kind, name string) (api.Object, bool)) *httptest.Server {
		srv := httptest.NewServer(server.New(server.Options{Store: st, Token: admin, ScopedKey: key, Sandboxes: c.nd, Actions: c.nd.Actions(), Cached: cached}).Handler())
		t.Cleanup(srv.Close)
		return srv
	}
	live := func(kind, name string) (api.Object, bool) {
		if cc := c.nd.cache(kind); cc != nil {
			return cc.Get(name)
		}
		return nil, false
	}
	// Replica b's caches stop here: it never sees the take-over.
	frozen := map[string]api.Object{}
	for _, k := range []string{api.KindAgent, api.KindSandbox} {
		o, ok := live(k, map[string]string{api.KindAgent: "helper", api.KindSandbox: "box"}[k])
		if !ok {
			t.Fatalf("%s not in the watch", k)
		}
		frozen[k] = o
	}
	bStore := &getCounter{API: c.st}
	a := replica(c.st, live)
	b := replica(bStore, func(kind, name string) (api.Object, bool) {
		o, ok := frozen[kind]
		return o, ok && o.GetMeta().Name == name
	})
	call := func(srv *httptest.Server, token, path, body string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	const click = `{"action":"mouse_move","coordinate":[3,4]}`

	// Before the take-over the agent's input goes through replica b, and
	// costs the store nothing.
	if code, body := call(b, agentToken, "/api/v1/sandboxes/box/input", click, nil); code != http.StatusOK {
		t.Fatalf("the agent's input before the take-over: %d %s", code, body)
	}
	if n := bStore.count(); n != 0 {
		t.Errorf("the agent's input through a replica that knows its agent and sandbox read the store %d times, want 0", n)
	}

	code, body := call(a, admin, "/api/v1/sandboxes/box/control", `{"action":"take","holder":"ana"}`, nil)
	if code != http.StatusOK {
		t.Fatalf("take control through replica a: %d %s", code, body)
	}
	var took server.ControlResponse
	if err := json.Unmarshal([]byte(body), &took); err != nil || took.Control == nil || took.Key == "" {
		t.Fatalf("take control: %s (%v)", body, err)
	}

	// At once: replica b still sees no take-over, the node refuses.
	if code, body := call(b, agentToken, "/api/v1/sandboxes/box/input", click, nil); code != http.StatusConflict || !strings.Contains(body, "ana holds control") {
		t.Errorf("the agent's input through replica b right after the take-over: %d %s, want 409 naming the holder", code, body)
	}
	if code, body := call(b, admin, "/api/v1/sandboxes/box/input", click, nil); code != http.StatusConflict {
		t.Errorf("input without the control key through replica b: %d %s, want 409", code, body)
	}
	if code, body := call(b, admin, "/api/v1/sandboxes/box/input", click, map[string]string{api.ControlHeader: took.Key}); code != http.StatusOK {
		t.Errorf("the holder's input through replica b: %d %s", code, body)
	}

	// Handed back through replica b: the agent's input goes through
	// again, through either replica.
	if code, body := call(b, admin, "/api/v1/sandboxes/box/control", `{"action":"release","id":"`+took.Control.ID+`"}`, nil); code != http.StatusOK {
		t.Fatalf("release through replica b: %d %s", code, body)
	}
	for name, srv := range map[string]*httptest.Server{"a": a, "b": b} {
		if code, body := call(srv, agentToken, "/api/v1/sandboxes/box/input", click, nil); code != http.StatusOK {
			t.Errorf("the agent's input through replica %s after the hand-back: %d %s", name, code, body)
		}
	}
}
