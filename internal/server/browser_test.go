//go:build linux

package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/testlog"
	"github.com/hvkube/hvkube/internal/web/webtest"
)

// dumpDOM loads url in headless Chromium, lets its scripts run, and
// returns the page's DOM.
func dumpDOM(t *testing.T, browser, url string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=15000",
	}, extra...)
	args = append(args, "--dump-dom", url)
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, browser, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, errOut.String())
	}
	return out.String()
}

// attackPage tries what a page on another origin can do to a server on
// loopback without asking: a no-cors text/plain POST, a JSON POST (which
// needs a CORS preflight), a read, and a text/plain form POST.
const attackPage = `<!doctype html>
<html><body>
<form id="f" method="POST" action="API/api/v1/sandboxes" target="sink" enctype="text/plain">
<input type="hidden" name='{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"formed"},"spec":{},"x":"' value='"}'>
</form>
<iframe name="sink"></iframe>
<div id="out">pending</div>
<script>
const api = "API";
const body = JSON.stringify({apiVersion: "hvkube/v1", kind: "Sandbox", metadata: {name: "from-page"}});
async function attempt(name, f) {
  try { return name + ":" + await f(); } catch (e) { return name + ":blocked"; }
}
(async () => {
  const out = [];
  out.push(await attempt("simple", async () => { await fetch(api + "/api/v1/sandboxes", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body}); return "sent"; }));
  out.push(await attempt("json", async () => (await fetch(api + "/api/v1/sandboxes", {method: "POST", headers: {"Content-Type": "application/json"}, body})).status));
  out.push(await attempt("read", async () => (await fetch(api + "/api/v1/sandboxes")).status));
  document.getElementById("f").submit();
  await new Promise(r => setTimeout(r, 1000));
  document.getElementById("out").textContent = "done " + out.join(" ");
})();
</script>
</body></html>`

// TestBrowserCannotDriveServer runs a real browser against a real server:
// a page on another origin cannot create anything or read the API, and a
// name re-pointed at 127.0.0.1 (DNS rebinding) gets 421.
func TestBrowserCannotDriveServer(t *testing.T) {
	browser := webtest.Chromium(t)
	var logs testlog.Buffer
	srv := serveReal(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	api := "http://" + srv.addr
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, strings.ReplaceAll(attackPage, "API", api))
	}))
	defer page.Close()
	// The page comes from localhost (another origin than 127.0.0.1:port,
	// and another site).
	_, pagePort, _ := net.SplitHostPort(strings.TrimPrefix(page.URL, "http://"))
	dom := dumpDOM(t, browser, "http://localhost:"+pagePort+"/")
	if !strings.Contains(dom, "done simple:sent json:blocked read:blocked") {
		t.Fatalf("the page's attempts: %s", dom)
	}
	if rv := rvOf(t, srv.st); rv != 0 {
		t.Fatalf("a page on another origin changed the store (revision %d)", rv)
	}
	if n := strings.Count(logs.String(), `msg="request refused" method=POST path=/api/v1/sandboxes`); n < 2 {
		t.Fatalf("want the no-cors POST and the form POST refused, saw %d refusals:\n%s", n, logs.String())
	}

	_, port, _ := net.SplitHostPort(srv.addr)
	dom = dumpDOM(t, browser, "http://evil.example:"+port+"/api/v1/sandboxes", "--host-resolver-rules=MAP evil.example 127.0.0.1")
	if !strings.Contains(dom, "is not a name of this server") {
		t.Fatalf("a DNS-rebound name read: %s", dom)
	}
}
