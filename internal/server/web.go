package server

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/hvkube/hvkube/internal/web"
)

// The dashboard is a page (/) and its assets (/ui/…), embedded in the
// binary. They hold nothing secret and need no token: the page asks for
// the token and sends it on its API calls, which need it as every other
// client's do.

// dashboardPath reports whether p is the dashboard's, served without a
// token. Only clean paths: "/ui/../api/…" is not one.
func dashboardPath(p string) bool {
	return p == "/" || (strings.HasPrefix(p, "/ui/") && path.Clean(p) == p)
}

func (s *Server) webRoutes() {
	files, _ := web.Files()
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		panic("the embedded dashboard has no index.html: " + err.Error())
	}
	assets := http.FileServerFS(files)
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		// The terminal (xterm.js) writes its styles into <style> elements:
		// the page's own nonce lets those in, and no other inline style.
		nonce := styleNonce()
		setPageHeaders(w, r, nonce)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		page := bytes.Replace(index, []byte("<head>"), []byte(`<head><meta name="hvkube-style-nonce" content="`+nonce+`">`), 1)
		http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(page))
	})
	s.mux.HandleFunc("GET /ui/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no directory listings
			return
		}
		setPageHeaders(w, r, "")
		// Asset names carry a hash of their content.
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		assets.ServeHTTP(w, r)
	})
}

// styleNonce is a fresh CSP nonce: 128 random bits.
func styleNonce() string {
	b := make([]byte, 16)
	rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// plainHost matches a Host header that is safe to repeat in a header.
var plainHost = regexp.MustCompile(`^[A-Za-z0-9.\-]+(:[0-9]+)?$|^\[[0-9A-Fa-f:.]+\](:[0-9]+)?$`)

// setPageHeaders limits what the dashboard's pages may load and do: their
// own scripts and styles only, connections to this server only (its API
// and its display WebSocket), no framing by other pages.
func setPageHeaders(w http.ResponseWriter, r *http.Request, nonce string) {
	h := w.Header()
	// 'self' covers ws: of the same host in current browsers; naming the
	// host covers the others.
	connect := "connect-src 'self'"
	if plainHost.MatchString(r.Host) {
		connect += " ws://" + r.Host + " wss://" + r.Host
	}
	style := "style-src 'self'"
	if nonce != "" {
		style += " 'nonce-" + nonce + "'"
	}
	h.Set("Content-Security-Policy", strings.Join([]string{
		"default-src 'none'",
		"script-src 'self'",
		style,
		"img-src 'self' blob: data:",
		"media-src 'self' blob:",
		connect,
		"base-uri 'none'",
		"form-action 'self'",
		"frame-ancestors 'none'",
	}, "; "))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}
