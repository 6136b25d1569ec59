package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// fileLogs serves the logs of sandboxes and agents from files in a
// directory: sandboxes/NAME.log and agents/NAME/ATTEMPT/REL (the node keeps
// an attempt's agent.log beside that directory, and reads this layout
// too). Only Logs of Sandboxes is implemented.
type fileLogs struct {
	Sandboxes
	dir string
	st  interface {
		Get(ctx context.Context, kind, name string) (api.Object, error)
	}
}

func (f *fileLogs) Logs(ctx context.Context, name string) (io.ReadCloser, error) {
	r, err := os.Open(filepath.Join(f.dir, "sandboxes", name+".log"))
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("no log of %s: %w", name, api.ErrNotFound)
	}
	return r, err
}

func (f *fileLogs) AgentFile(ctx context.Context, agent, rel string) (io.ReadCloser, error) {
	o, err := f.st.Get(ctx, api.KindAgent, agent)
	if err != nil {
		return nil, err
	}
	r, err := os.Open(filepath.Join(f.dir, "agents", agent, fmt.Sprint(o.(*api.Agent).Status.Attempts), rel))
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("no %s: %w", rel, api.ErrNotFound)
	}
	return r, err
}

// Screenshot answers with a fixed image: what the handler does around it
// is under test, not the screen.
func (f *fileLogs) Screenshot(ctx context.Context, name string, opts backend.ScreenshotOptions) ([]byte, string, error) {
	return []byte("image"), "image/" + opts.Format, nil
}

// The rest of display.Desktop, for the action layer around Screenshot.
func (f *fileLogs) ScreenSize(context.Context, string) (int, int, error) { return 1280, 800, nil }
func (f *fileLogs) SendInput(context.Context, string, []backend.InputEvent) error {
	return nil
}
func (f *fileLogs) TypeText(context.Context, string, string) error { return nil }
func (f *fileLogs) CursorPosition(context.Context, string) (int, int, error) {
	return 0, 0, nil
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o700)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString(text)
}

// follow opens a follow of path and returns a reader of its lines.
func follow(t *testing.T, ts *testServer, path, accept string) (*http.Response, *bufio.Reader) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, bufio.NewReader(resp.Body)
}

func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		l, err := r.ReadString('\n')
		if err != nil && l == "" {
			l = "<" + err.Error() + ">"
		}
		done <- strings.TrimSuffix(l, "\n")
	}()
	select {
	case l := <-done:
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("no line within 20s")
		return ""
	}
}

func newLogServer(t *testing.T) (*testServer, *fileLogs) {
	fl := &fileLogs{dir: t.TempDir()}
	ts := start(t, Options{Sandboxes: fl, Agents: fl})
	fl.st = ts.st
	return ts, fl
}

// TestFollowAgentLog: a follow gets what the log holds, then the lines
// appended after the request, then moves to the next attempt's log, and
// ends once the agent has finished.
func TestFollowAgentLog(t *testing.T) {
	ts, fl := newLogServer(t)
	runningAgent(t, ts, "writer", "desk")
	logOf := func(attempt int) string {
		return filepath.Join(fl.dir, "agents", "writer", fmt.Sprint(attempt), "agent.log")
	}
	appendFile(t, logOf(1), "one\n")

	resp, r := follow(t, ts, "/api/v1/agents/writer/logs?follow=true", "")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("follow: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if l := readLine(t, r); l != "one" {
		t.Fatalf("first line %q", l)
	}
	appendFile(t, logOf(1), "two\n")
	if l := readLine(t, r); l != "two" {
		t.Fatalf("appended line %q", l)
	}
	// A retry: the agent's next attempt writes a new log.
	a := ts.agent(t, "writer")
	a.Status.Attempts = 2
	if _, err := ts.st.UpdateStatus(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	appendFile(t, logOf(2), "three\n")
	if l := readLine(t, r); l != "three" {
		t.Fatalf("next attempt's line %q", l)
	}
	appendFile(t, logOf(2), "four\n")
	setAgentPhase(t, ts, "writer", api.AgentCompleted, "desk")
	if l := readLine(t, r); l != "four" {
		t.Fatalf("last line %q", l)
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("after the end: %q %v", rest, err)
	}
}

// TestFollowSandboxLogSSE: the same as server-sent events, ending when the
// sandbox is deleted.
func TestFollowSandboxLogSSE(t *testing.T) {
	ts, fl := newLogServer(t)
	code, _, body := ts.do(t, "POST", "/api/v1/sandboxes", "application/json", `{"apiVersion":"hvkube/v1","kind":"Sandbox","metadata":{"name":"desk"},"spec":{}}`)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	path := filepath.Join(fl.dir, "sandboxes", "desk.log")
	appendFile(t, path, "boot\r\n")

	resp, r := follow(t, ts, "/api/v1/sandboxes/desk/logs?follow=true", "text/event-stream")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("follow: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	event := func() string {
		t.Helper()
		var lines []string
		for {
			l := readLine(t, r)
			if l == "" {
				return strings.Join(lines, "|")
			}
			if strings.HasPrefix(l, "<") {
				t.Fatalf("stream ended: %s", l)
			}
			lines = append(lines, l)
		}
	}
	if e := event(); e != "data: boot" {
		t.Fatalf("first event %q", e)
	}
	appendFile(t, path, "login: ")
	appendFile(t, path, "ready\n")
	if e := event(); e != "data: login: ready" {
		t.Fatalf("appended event %q", e)
	}
	appendFile(t, path, "bye\n")
	if e := event(); e != "data: bye" {
		t.Fatalf("event %q", e)
	}
	if code, _, _ := ts.do(t, "DELETE", "/api/v1/sandboxes/desk", "", ""); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if e := event(); e != "event: end|data: it was deleted" {
		t.Fatalf("end event %q", e)
	}
}

func TestFollowBadInput(t *testing.T) {
	ts, _ := newLogServer(t)
	runningAgent(t, ts, "writer", "desk")
	for _, tt := range []struct {
		path  string
		code  int
		field string
	}{
		{"/api/v1/agents/writer/logs?follow=maybe", 400, "follow"},
		{"/api/v1/agents/nobody/logs?follow=true", 404, ""},
		{"/api/v1/sandboxes/nowhere/logs?follow=true", 404, ""},
	} {
		code, _, body := ts.do(t, "GET", tt.path, "", "")
		if code != tt.code || !strings.Contains(string(body), `"field":"`+tt.field+`"`) && tt.field != "" {
			t.Errorf("%s: %d %s", tt.path, code, body)
		}
	}
}
