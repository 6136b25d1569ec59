//go:build linux

package server

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/client"
)

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTerminalOnQEMU: a terminal in a real desktop, through the API: a
// shell on a PTY as the desktop's user types and answers, follows a
// resize, is interrupted by Ctrl-C, and its exit status comes back. An
// agent's token opens its attempt's terminal, and is refused while a
// person holds the sandbox.
func TestTerminalOnQEMU(t *testing.T) {
	d := deskOnQEMU(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.New(d.url, "admin")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	term, err := c.OpenTerminal(ctx, "desk", []string{"bash", "--norc", "--noprofile", "-i"}, 30, 100, "xterm")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("terminal open in %s", time.Since(start).Round(time.Millisecond))
	defer term.Close()
	var out syncBuffer
	done := make(chan int, 1)
	go func() {
		code, err := term.Copy(ctx, &out)
		if err != nil {
			t.Errorf("copy: %v", err)
		}
		done <- code
	}()
	waitOut := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), want); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the terminal's output:\n%s", want, out.String())
			}
		}
	}
	type_ := func(s string) {
		t.Helper()
		if _, err := term.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	type_("echo \"user=$(id -un) tty=$(tty)\"; stty size\n")
	waitOut("user=agent tty=/dev/pts/")
	waitOut("30 100")
	if err := term.Resize(ctx, 40, 120); err != nil {
		t.Fatal(err)
	}
	type_("stty size\n")
	waitOut("40 120")
	type_("sleep 300\n")
	time.Sleep(time.Second)
	type_("\x03")
	type_("echo after-$((6*7))\n")
	waitOut("after-42")
	type_("exit 3\n")
	select {
	case code := <-done:
		if code != 3 {
			t.Errorf("exit status %d, want 3", code)
		}
	case <-ctx.Done():
		t.Fatalf("no exit status:\n%s", out.String())
	}

	// An agent's token: its attempt's terminal, until a person takes
	// the sandbox.
	bindAgent(t, d.st, "loop", "desk", 1)
	at, err := client.New(d.url, attemptToken(t, d.st, testKey, "loop"))
	if err != nil {
		t.Fatal(err)
	}
	term2, err := at.OpenTerminal(ctx, "desk", []string{"true"}, 0, 0, "")
	if err != nil {
		t.Fatalf("the agent's own terminal: %v", err)
	}
	if code, err := term2.Copy(ctx, &bytes.Buffer{}); err != nil || code != 0 {
		t.Errorf("the agent's terminal: %d %v", code, err)
	}
	d.call(t, "POST", "/api/v1/sandboxes/desk/control", `{"action":"take","holder":"ann"}`, nil)
	_, err = at.OpenTerminal(ctx, "desk", []string{"true"}, 0, 0, "")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != 409 || !strings.Contains(ce.Message, "ann holds") {
		t.Errorf("the agent's terminal while a person holds the sandbox: %v, want 409, as exec", err)
	}
	// Bad input names the field.
	_, err = c.OpenTerminal(ctx, "desk", []string{"true"}, 5000, 80, "")
	if !errors.As(err, &ce) || ce.Code != 400 || !strings.Contains(ce.Message, "rows") {
		t.Errorf("rows 5000: %v", err)
	}
}
