package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/authtoken"
	"github.com/hvkube/hvkube/internal/reconcile"
)

var testKey = authtoken.Key([]byte(strings.Repeat("d", 32)))

// displayServer is a server with a token and a key, and two sandboxes,
// "desk" (labelled pool: web, held by take-over "take-1") and "other".
func displayServer(t *testing.T, token string) *testServer {
	t.Helper()
	ts := start(t, Options{Token: token, ScopedKey: testKey})
	for _, name := range []string{"desk", "other"} {
		sb := &api.Sandbox{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindSandbox}}
		sb.Metadata.Name = name
		sb.Metadata.Labels = map[string]string{"pool": "web"}
		if name == "other" {
			sb.Metadata.Labels["pool"] = "other"
		}
		api.Default(sb)
		if _, err := ts.st.Create(context.Background(), sb); err != nil {
			t.Fatal(err)
		}
	}
	// The agents of the scoped tokens below.
	bindAgent(t, ts.st, "a", "desk", 1)
	bindAgent(t, ts.st, "b", "other", 1)
	if _, err := reconcile.UpdateStatus(context.Background(), ts.st, api.KindSandbox, "desk", func(sb *api.Sandbox) bool {
		sb.Status.Control = &api.SandboxControl{ID: "take-1", Holder: "ana", Since: time.Now()}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return ts
}

// upgrade sends a WebSocket upgrade request and returns the status (the
// server has no backend, so one that passes authorization gets 501).
func upgrade(t *testing.T, base, path string, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e errorBody
	json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e.Error
}

func TestDisplayAuthorization(t *testing.T) {
	ts := displayServer(t, "admin")
	now := time.Now()
	view, _ := testKey.MintDisplay(authtoken.DisplayClaims{Sandbox: "desk"}, now, time.Minute)
	expired, _ := testKey.MintDisplay(authtoken.DisplayClaims{Sandbox: "desk"}, now.Add(-time.Hour), time.Minute)
	otherSandbox, _ := testKey.MintDisplay(authtoken.DisplayClaims{Sandbox: "other"}, now, time.Minute)
	forged, _ := authtoken.Key([]byte(strings.Repeat("x", 32))).MintDisplay(authtoken.DisplayClaims{Sandbox: "desk"}, now, time.Minute)
	scoped := attemptToken(t, ts.st, testKey, "a")
	scopedOther := attemptToken(t, ts.st, testKey, "b")
	const path = "/api/v1/sandboxes/desk/display"
	for _, tt := range []struct {
		name string
		path string
		hdr  map[string]string
		want int
	}{
		{"no token", path, nil, http.StatusUnauthorized},
		{"display token", path + "?token=" + view, nil, http.StatusNotImplemented},
		{"expired", path + "?token=" + expired, nil, http.StatusUnauthorized},
		{"another sandbox", path + "?token=" + otherSandbox, nil, http.StatusForbidden},
		{"bad signature", path + "?token=" + forged, nil, http.StatusUnauthorized},
		{"garbage", path + "?token=abc", nil, http.StatusUnauthorized},
		{"server token in the URL", path + "?token=admin", nil, http.StatusUnauthorized},
		{"server token", path, map[string]string{"Authorization": "Bearer admin"}, http.StatusNotImplemented},
		{"wrong bearer", path, map[string]string{"Authorization": "Bearer nope"}, http.StatusUnauthorized},
		{"scoped token of the sandbox", path, map[string]string{"Authorization": "Bearer " + scoped}, http.StatusNotImplemented},
		{"scoped token of another", path, map[string]string{"Authorization": "Bearer " + scopedOther}, http.StatusForbidden},
		{"unknown sandbox, no token", "/api/v1/sandboxes/nope/display", nil, http.StatusUnauthorized},
		{"unknown sandbox", "/api/v1/sandboxes/nope/display", map[string]string{"Authorization": "Bearer admin"}, http.StatusNotFound},
		{"cross-origin upgrade", path + "?token=" + view, map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		{"cross-site upgrade", path + "?token=" + view, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"same-origin upgrade", path + "?token=" + view, map[string]string{"Origin": ts.URL}, http.StatusNotImplemented},
		// A display token opens the display and nothing else.
		{"display token elsewhere", "/api/v1/sandboxes/desk?token=" + view, nil, http.StatusUnauthorized},
		{"display token on screen", "/api/v1/sandboxes/desk/screen?token=" + view, nil, http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if code, msg := upgrade(t, ts.URL, tt.path, tt.hdr); code != tt.want {
				t.Fatalf("%s: %d (%s), want %d", tt.path, code, msg, tt.want)
			}
		})
	}
	// Without an upgrade the display says what it is.
	req, _ := http.NewRequest("GET", ts.URL+path, nil)
	req.Header.Set("Authorization", "Bearer admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented { // no backend comes first
		t.Fatalf("plain GET: %d", resp.StatusCode)
	}
}

func TestDisplayGatewayPath(t *testing.T) {
	for _, tt := range []struct {
		name   string
		token  string
		ds     string // YAML of a DisplayService, or none
		path   string
		want   int
		reason string
	}{
		{name: "no service", path: "/display/desk", token: "", want: http.StatusUnauthorized},
		{name: "no service, token", path: "/display/desk?token=" + mint("desk"), want: http.StatusNotFound},
		{name: "jwt without token", ds: dsYAML("ClusterIP", "jwt", ""), path: "/display/desk", want: http.StatusUnauthorized},
		{name: "jwt with token", ds: dsYAML("ClusterIP", "jwt", ""), path: "/display/desk?token=" + mint("desk"), want: http.StatusNotImplemented},
		{name: "jwt, token of another sandbox", ds: dsYAML("ClusterIP", "jwt", ""), path: "/display/desk?token=" + mint("other"), want: http.StatusForbidden},
		{name: "unselected sandbox", ds: dsYAML("ClusterIP", "jwt", ""), path: "/display/other?token=" + mint("other"), want: http.StatusNotFound},
		{name: "auth none on loopback", ds: dsYAML("ClusterIP", "none", ""), path: "/display/desk", want: http.StatusNotImplemented},
		{name: "auth none on loopback, server token", token: "admin", ds: dsYAML("ClusterIP", "none", ""), path: "/display/desk", want: http.StatusNotImplemented},
		{name: "LoadBalancer without server token is not served", ds: dsYAML("LoadBalancer", "jwt", "5999"), path: "/display/desk?token=" + mint("desk"), want: http.StatusNotFound},
		{name: "LoadBalancer with server token", token: "admin", ds: dsYAML("LoadBalancer", "jwt", "5999"), path: "/display/desk?token=" + mint("desk"), want: http.StatusNotImplemented},
		{name: "gateway disabled", ds: strings.Replace(dsYAML("ClusterIP", "none", ""), "enabled: true", "enabled: false", 1), path: "/display/desk", want: http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts := displayServer(t, tt.token)
			if tt.ds != "" {
				if code, _, body := ts.do(t, "POST", "/api/v1/displayservices", "application/yaml", tt.ds); code != http.StatusCreated && code != http.StatusUnauthorized {
					t.Fatalf("create: %d %s", code, body)
				}
				if tt.token != "" {
					o, err := api.DecodeOne([]byte(tt.ds), api.DecodeOptions{})
					if err != nil {
						t.Fatal(err)
					}
					api.Default(o)
					ts.st.Create(context.Background(), o)
				}
			}
			if code, msg := upgrade(t, ts.URL, tt.path, nil); code != tt.want {
				t.Fatalf("%s: %d (%s), want %d", tt.path, code, msg, tt.want)
			}
		})
	}
}

func mint(sandbox string) string {
	tok, _ := testKey.MintDisplay(authtoken.DisplayClaims{Sandbox: sandbox}, time.Now(), time.Minute)
	return tok
}

func dsYAML(typ, auth, port string) string {
	y := "apiVersion: hvkube/v1\nkind: DisplayService\nmetadata: {name: web}\nspec:\n  selector: {pool: web}\n  type: " + typ +
		"\n  gateway: {enabled: true, auth: " + auth + "}\n"
	if port != "" {
		y += "  ports: [{name: vnc, port: " + port + "}]\n"
	}
	return y
}

func TestDisplayToken(t *testing.T) {
	ts := displayServer(t, "admin")
	post := func(t *testing.T, auth, body string) (int, DisplayTokenResponse, errorBody) {
		t.Helper()
		req, _ := http.NewRequest("POST", ts.URL+"/api/v1/sandboxes/desk/display/token", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+auth)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out DisplayTokenResponse
		var e errorBody
		if resp.StatusCode == http.StatusOK {
			json.NewDecoder(resp.Body).Decode(&out)
		} else {
			json.NewDecoder(resp.Body).Decode(&e)
		}
		return resp.StatusCode, out, e
	}

	code, out, e := post(t, "admin", "")
	if code != http.StatusOK {
		t.Fatalf("mint: %d %+v", code, e)
	}
	c, err := testKey.VerifyDisplay(out.Token, time.Now())
	if err != nil || c.Sandbox != "desk" || c.Control != "" {
		t.Fatalf("token %+v %v", c, err)
	}
	if d := time.Until(out.ExpiresAt); d < 4*time.Minute || d > 5*time.Minute {
		t.Fatalf("expires in %s, want 5 min", d)
	}
	u, err := url.Parse(out.URL)
	if err != nil || u.Scheme != "ws" || u.Path != "/api/v1/sandboxes/desk/display" || u.Query().Get("token") != out.Token {
		t.Fatalf("url %q", out.URL)
	}
	if !strings.HasPrefix(out.Page, ts.URL+"/#/sandboxes/desk?token=") {
		t.Fatalf("page %q", out.Page)
	}

	code, out, _ = post(t, "admin", `{"control": "`+testKey.ControlKey("desk", "take-1")+`", "ttlSeconds": 60}`)
	if code != http.StatusOK {
		t.Fatalf("mint with control: %d", code)
	}
	if c, err := testKey.VerifyDisplay(out.Token, time.Now()); err != nil || c.Control != "take-1" || c.ExpiresAt-c.IssuedAt != 60 {
		t.Fatalf("token %+v %v", c, err)
	}

	scoped := attemptToken(t, ts.st, testKey, "a")
	for _, tt := range []struct {
		name, auth, body string
		code             int
		field            string
	}{
		{"scoped token may watch", scoped, "", http.StatusOK, ""},
		{"scoped token may not take control", scoped, `{"control": "` + testKey.ControlKey("desk", "take-1") + `"}`, http.StatusForbidden, "control"},
		{"the take-over's id is not its key", "admin", `{"control": "take-1"}`, http.StatusConflict, "control"},
		{"stale take-over", "admin", `{"control": "` + testKey.ControlKey("desk", "take-0") + `"}`, http.StatusConflict, "control"},
		{"ttl too long", "admin", `{"ttlSeconds": 3601}`, http.StatusBadRequest, "ttlSeconds"},
		{"ttl negative", "admin", `{"ttlSeconds": -1}`, http.StatusBadRequest, "ttlSeconds"},
		{"unknown field", "admin", `{"ttl": 5}`, http.StatusBadRequest, "ttl"},
		{"wrong type", "admin", `{"control": 5}`, http.StatusBadRequest, "control"},
		{"no token", "", "", http.StatusUnauthorized, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, e := post(t, tt.auth, tt.body)
			if code != tt.code || e.Field != tt.field {
				t.Fatalf("%d %+v, want %d field %q", code, e, tt.code, tt.field)
			}
		})
	}
}

// TestControlTakeGivesDisplayToken: taking control answers a display token
// that carries the take-over, for the live view's input.
func TestControlTakeGivesDisplayToken(t *testing.T) {
	ts := start(t, Options{ScopedKey: testKey})
	code, _, body := ts.do(t, "POST", "/api/v1/sandboxes", "application/json", sandboxJSON)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	code, _, body = ts.do(t, "POST", "/api/v1/sandboxes/desk/control", "application/json", `{"action":"take","holder":"ana"}`)
	if code != http.StatusOK {
		t.Fatalf("take: %d %s", code, body)
	}
	var resp ControlResponse
	if err := json.Unmarshal(body, &resp); err != nil || resp.Control == nil {
		t.Fatalf("take answered %s", body)
	}
	c, err := testKey.VerifyDisplay(resp.Token, time.Now())
	if err != nil || c.Sandbox != "desk" || c.Control != resp.Control.ID {
		t.Fatalf("token %+v %v, take-over %s", c, err, resp.Control.ID)
	}
}
