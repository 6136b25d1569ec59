package server

import (
	"io"
	"io/fs"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/web"
)

// TestDashboardServing checks what / and /ui/ answer with a token set:
// the page and its assets without the token, with headers that keep them
// to this server; the API still needs the token; no directory listings,
// and no way round the token through the asset path.
func TestDashboardServing(t *testing.T) {
	srv := serveReal(t, Options{Token: "s3cret"})
	base := "http://" + srv.addr
	get := func(path string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		// Not following redirects: a redirect is an answer to check.
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	resp, body := get("/", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "<html") {
		t.Fatalf("GET / without a token: %d %.200s", resp.StatusCode, body)
	}
	for k, want := range map[string]string{
		"Content-Type":           "text/html; charset=utf-8",
		"Cache-Control":          "no-store",
		"X-Content-Type-Options": "nosniff",
		"X-Frame-Options":        "DENY",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("GET / %s = %q, want %q", k, got, want)
		}
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self' ws://" + srv.addr, "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") {
		t.Errorf("CSP allows unsafe sources: %q", csp)
	}

	files, built := web.Files()
	if built {
		var asset string
		fs.WalkDir(files, "ui", func(p string, d fs.DirEntry, err error) error {
			if strings.HasSuffix(p, ".js") {
				asset = "/" + p
			}
			return nil
		})
		resp, body = get(asset, nil)
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "javascript") || len(body) == 0 {
			t.Fatalf("GET %s: %d %q", asset, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if !strings.Contains(resp.Header.Get("Cache-Control"), "immutable") {
			t.Errorf("GET %s Cache-Control = %q", asset, resp.Header.Get("Cache-Control"))
		}
	} else {
		t.Log("the dashboard is not built (make web): the placeholder page is served")
		if !strings.Contains(body, "make build") {
			t.Errorf("the placeholder page does not say how to build the dashboard: %s", body)
		}
	}

	for _, tc := range []struct {
		path string
		want int
	}{
		{"/api/v1/sandboxes", http.StatusUnauthorized},
		{"/version", http.StatusUnauthorized},
		{"/ui/", http.StatusUnauthorized},    // no listing: not a file
		{"/ui/nope.js", http.StatusNotFound}, // only built files
		{"/ui/../api/v1/sandboxes", http.StatusUnauthorized},
		{"/ui/..%2fapi/v1/sandboxes", http.StatusUnauthorized},
	} {
		if resp, body := get(tc.path, nil); resp.StatusCode != tc.want {
			t.Errorf("GET %s without a token: %d, want %d (%.200s)", tc.path, resp.StatusCode, tc.want, body)
		}
	}
	// A page of another site may not embed the dashboard's script.
	if resp, _ := get("/", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site subresource read of /: %d, want 403", resp.StatusCode)
	}
	if resp, _ := get("/", map[string]string{"Host": "evil.example"}); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("GET / with a foreign Host: %d, want 421", resp.StatusCode)
	}
}

// TestDashboardStyleNonce: each load of the page has a style nonce of its
// own, in its policy and in the page (for the terminal's <style>
// elements), and the policy lets in no other inline style.
func TestDashboardStyleNonce(t *testing.T) {
	ts := start(t, Options{})
	seen := map[string]bool{}
	for range 2 {
		code, hdr, body := ts.do(t, "GET", "/", "", "")
		if code != 200 {
			t.Fatalf("GET /: %d", code)
		}
		csp := hdr.Get("Content-Security-Policy")
		m := regexp.MustCompile(`style-src 'self' 'nonce-([A-Za-z0-9+/=]{24})'(;|$)`).FindStringSubmatch(csp)
		if m == nil {
			t.Fatalf("policy %q: want style-src 'self' and a nonce", csp)
		}
		if strings.Contains(csp, "unsafe-inline") {
			t.Errorf("policy %q allows inline styles", csp)
		}
		if !strings.Contains(string(body), `<meta name="hvkube-style-nonce" content="`+m[1]+`">`) {
			t.Error("the page does not carry its policy's nonce")
		}
		if seen[m[1]] {
			t.Error("two loads of the page had the same nonce")
		}
		seen[m[1]] = true
	}
}
