package cdp

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// MaxTargetList bounds a DevTools target list that RewriteTargetList
// rewrites; a longer one passes unchanged.
const MaxTargetList = 1 << 20

// IsTargetList reports whether p (a path on a DevTools HTTP endpoint) is
// one of the JSON answers that name targets with their URLs.
func IsTargetList(p string) bool {
	switch strings.TrimSuffix(p, "/") {
	case "/json", "/json/version", "/json/list", "/json/new":
		return true
	}
	return false
}

// RewriteTargetList rewrites, in resp's body, the webSocketDebuggerUrl and
// devtoolsFrontendUrl of each target with ws and frontend: what a proxy in
// front of DevTools does so that the URLs a client gets name the proxy.
// Only a 200 answer at path (IsTargetList), not encoded, of at most
// MaxTargetList bytes, that is a target or a list of them is rewritten;
// any other passes unchanged.
func RewriteTargetList(resp *http.Response, path string, ws, frontend func(string) string) error {
	if !IsTargetList(path) || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxTargetList+1))
	if err != nil {
		return err
	}
	if len(b) > MaxTargetList {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
		return nil
	}
	resp.Body.Close()
	if out, ok := RewriteTargets(b, ws, frontend); ok {
		b = out
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	}
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	return nil
}

// RewriteTargets is RewriteTargetList on a body: b, a target or a list of
// them, with ws and frontend applied to their URLs. Numbers keep their
// digits. It reports false, leaving b alone, for what is not such JSON.
func RewriteTargets(b []byte, ws, frontend func(string) string) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	fix := func(o any) {
		m, ok := o.(map[string]any)
		if !ok {
			return
		}
		if s, ok := m["webSocketDebuggerUrl"].(string); ok {
			m["webSocketDebuggerUrl"] = ws(s)
		}
		if s, ok := m["devtoolsFrontendUrl"].(string); ok {
			m["devtoolsFrontendUrl"] = frontend(s)
		}
	}
	switch v := v.(type) {
	case []any:
		for _, o := range v {
			fix(o)
		}
	case map[string]any:
		fix(v)
	default:
		return nil, false
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, false
	}
	return out.Bytes(), true
}
