package controller

import (
	"os"
	"reflect"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/store"
)

// seedDisplayService is seed 000's DisplayService: LoadBalancer, port
// 5900, gateway with auth jwt, selecting pool: browser-workers.
func seedDisplayService(t *testing.T) *api.DisplayService {
	t.Helper()
	b, err := os.ReadFile("../api/testdata/seed/displayservice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o, err := api.DecodeOne(b, api.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	api.Default(o)
	if err := api.Validate(o); err != nil {
		t.Fatal(err)
	}
	return o.(*api.DisplayService)
}

func TestDisplayServiceEndpoints(t *testing.T) {
	for _, tt := range []struct {
		name   string
		cfg    DisplayConfig
		edit   func(*api.DisplayService)
		ready  string // condition status
		reason string
		urls   []api.Endpoint
	}{
		{
			name: "seed LoadBalancer on the host address", cfg: DisplayConfig{HostAddress: "10.0.0.5", TokenSet: true},
			ready: api.ConditionTrue, reason: "EndpointsReady",
			urls: []api.Endpoint{{Sandbox: "bw-a", URL: "ws://10.0.0.5:5900/display/bw-a"}, {Sandbox: "bw-b", URL: "ws://10.0.0.5:5900/display/bw-b"}},
		},
		{
			name: "LoadBalancer refused without a server token", cfg: DisplayConfig{HostAddress: "10.0.0.5"},
			ready: api.ConditionFalse, reason: "NoToken",
		},
		{
			name: "NodePort with auth none refused", cfg: DisplayConfig{HostAddress: "10.0.0.5", TokenSet: true},
			edit:  func(ds *api.DisplayService) { ds.Spec.Type, ds.Spec.Gateway.Auth = "NodePort", "none" },
			ready: api.ConditionFalse, reason: "TokenRequired",
		},
		{
			name: "ClusterIP with a port listens on loopback", cfg: DisplayConfig{},
			edit:  func(ds *api.DisplayService) { ds.Spec.Type = "ClusterIP" },
			ready: api.ConditionTrue, reason: "EndpointsReady",
			urls: []api.Endpoint{{Sandbox: "bw-a", URL: "ws://127.0.0.1:5900/display/bw-a"}, {Sandbox: "bw-b", URL: "ws://127.0.0.1:5900/display/bw-b"}},
		},
		{
			name: "ClusterIP without ports is the server's gateway", cfg: DisplayConfig{ServerURL: "http://127.0.0.1:8080"},
			edit:  func(ds *api.DisplayService) { ds.Spec.Type, ds.Spec.Ports = "ClusterIP", nil },
			ready: api.ConditionTrue, reason: "EndpointsReady",
			urls: []api.Endpoint{{Sandbox: "bw-a", URL: "ws://127.0.0.1:8080/display/bw-a"}, {Sandbox: "bw-b", URL: "ws://127.0.0.1:8080/display/bw-b"}},
		},
		{
			name: "gateway disabled", cfg: DisplayConfig{TokenSet: true},
			edit:  func(ds *api.DisplayService) { ds.Spec.Gateway.Enabled = false },
			ready: api.ConditionFalse, reason: "GatewayDisabled",
		},
		{
			name: "another path", cfg: DisplayConfig{TokenSet: true},
			edit:  func(ds *api.DisplayService) { ds.Spec.Gateway.Path = "/vnc/{sandbox-id}" },
			ready: api.ConditionFalse, reason: "UnsupportedPath",
		},
		{
			name: "no sandbox selected", cfg: DisplayConfig{TokenSet: true},
			edit:  func(ds *api.DisplayService) { ds.Spec.Selector = map[string]string{"pool": "nobody"} },
			ready: api.ConditionFalse, reason: "NoSandboxes",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			d := NewDisplayServices(e.m, e.st, e.log, e.clk.Now, tt.cfg)
			for name, phase := range map[string]string{"bw-a": api.SandboxRunning, "bw-b": api.SandboxPaused, "bw-c": api.SandboxPending} {
				sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
				sb.Metadata.Name = name
				sb.Metadata.Labels = map[string]string{"pool": "browser-workers"}
				api.Default(sb)
				e.create(sb)
				e.editSandbox(name, func(s *api.SandboxStatus) { s.Phase = phase })
			}
			other := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
			other.Metadata.Name = "other"
			other.Metadata.Labels = map[string]string{"pool": "other"}
			api.Default(other)
			e.create(other)
			e.editSandbox("other", func(s *api.SandboxStatus) { s.Phase = api.SandboxRunning })

			ds := seedDisplayService(t)
			if tt.edit != nil {
				tt.edit(ds)
			}
			e.create(ds)
			e.sync()
			if _, err := d.Reconcile(e.ctx, ds.Metadata.Name); err != nil {
				t.Fatal(err)
			}
			got := e.get(api.KindDisplayService, ds.Metadata.Name).(*api.DisplayService)
			c := api.FindCondition(got.Status.Conditions, "Ready")
			if c == nil || c.Status != tt.ready || c.Reason != tt.reason {
				t.Fatalf("Ready condition %+v, want %s %s", c, tt.ready, tt.reason)
			}
			if got.Status.ObservedGeneration != got.Metadata.Generation || got.Status.ObservedGeneration == 0 {
				t.Fatalf("observedGeneration %d, generation %d", got.Status.ObservedGeneration, got.Metadata.Generation)
			}
			if !reflect.DeepEqual(got.Status.Endpoints, tt.urls) {
				t.Fatalf("endpoints %+v, want %+v", got.Status.Endpoints, tt.urls)
			}
			// The sandboxes it selects map to it; others do not.
			if keys := d.servicesFor(e.sandbox("bw-c")); tt.reason != "NoSandboxes" && !reflect.DeepEqual(keys, []string{ds.Metadata.Name}) {
				t.Fatalf("a selected sandbox maps to %v", keys)
			}
			if keys := d.servicesFor(e.sandbox("other")); len(keys) != 0 {
				t.Fatalf("an unselected sandbox maps to %v", keys)
			}
		})
	}
}

// TestDisplayServiceFollowsSandboxes: a sandbox that starts running joins
// the endpoints, one deleted leaves them, and an unchanged service is not
// written again.
func TestDisplayServiceFollowsSandboxes(t *testing.T) {
	e := newEnv(t)
	d := NewDisplayServices(e.m, e.st, e.log, e.clk.Now, DisplayConfig{ServerURL: "http://127.0.0.1:8080"})
	ds := seedDisplayService(t)
	ds.Spec.Type, ds.Spec.Ports = "ClusterIP", nil
	e.create(ds)
	reconcile := func() *api.DisplayService {
		t.Helper()
		e.sync()
		if _, err := d.Reconcile(e.ctx, ds.Metadata.Name); err != nil {
			t.Fatal(err)
		}
		return e.get(api.KindDisplayService, ds.Metadata.Name).(*api.DisplayService)
	}
	if got := reconcile(); len(got.Status.Endpoints) != 0 || api.FindCondition(got.Status.Conditions, "Ready").Reason != "NoSandboxes" {
		t.Fatalf("status with no sandbox: %+v", got.Status)
	}
	sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
	sb.Metadata.Name = "bw-1"
	sb.Metadata.Labels = map[string]string{"pool": "browser-workers"}
	api.Default(sb)
	e.create(sb)
	if got := reconcile(); len(got.Status.Endpoints) != 0 {
		t.Fatalf("a pending sandbox has an endpoint: %+v", got.Status.Endpoints)
	}
	e.editSandbox("bw-1", func(s *api.SandboxStatus) { s.Phase = api.SandboxRunning })
	got := reconcile()
	want := []api.Endpoint{{Sandbox: "bw-1", URL: "ws://127.0.0.1:8080/display/bw-1"}}
	if !reflect.DeepEqual(got.Status.Endpoints, want) {
		t.Fatalf("endpoints %+v, want %+v", got.Status.Endpoints, want)
	}
	rv := got.Metadata.ResourceVersion
	if again := reconcile(); again.Metadata.ResourceVersion != rv {
		t.Fatalf("an unchanged status was written again (%s → %s)", rv, again.Metadata.ResourceVersion)
	}
	if _, _, err := e.st.Delete(e.ctx, api.KindSandbox, "bw-1", store.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := reconcile(); len(got.Status.Endpoints) != 0 {
		t.Fatalf("a deleted sandbox keeps its endpoint: %+v", got.Status.Endpoints)
	}
}
