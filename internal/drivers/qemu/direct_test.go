package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qga/qgatest"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp/qmptest"
)

// TestDirectMonitor: a command without arguments goes out without an
// "arguments" member, one with them as given; input events go out as the
// Backend sends them, and one the contract does not know is refused.
func TestDirectMonitor(t *testing.T) {
	ctx := context.Background()
	peer := qmptest.NewPeer(t)
	peer.Handle("query-status", func(context.Context, qmptest.Request) (any, error) {
		return map[string]any{"status": "running"}, nil
	})
	peer.Handle("input-send-event", func(context.Context, qmptest.Request) (any, error) { return nil, nil })
	mon, err := Direct{}.DialMonitor(ctx, peer.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()

	tests := []struct {
		name, command string
		args          json.RawMessage
		wantArgs      string
		wantRet       string
	}{
		{"no arguments", "query-status", nil, "", `{"status":"running"}`},
		{"arguments", "query-status", json.RawMessage(`{"verbose":true}`), `{"verbose":true}`, `{"status":"running"}`},
	}
	for _, tt := range tests {
		ret, err := mon.Command(ctx, tt.command, tt.args)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := strings.Join(strings.Fields(string(ret)), ""); got != tt.wantRet {
			t.Errorf("%s: answer %s, want %s", tt.name, got, tt.wantRet)
		}
		reqs := peer.Requests()
		if got := string(reqs[len(reqs)-1].Arguments); got != tt.wantArgs {
			t.Errorf("%s: QEMU got arguments %q, want %q", tt.name, got, tt.wantArgs)
		}
	}

	if err := mon.SendEvent(ctx, backend.InputEvent{Kind: backend.EventButton, Button: backend.ButtonBack, Down: true}, 1280, 800); err != nil {
		t.Fatal(err)
	}
	reqs := peer.Requests()
	if got := string(reqs[len(reqs)-1].Arguments); !strings.Contains(got, `"button":"side"`) || !strings.Contains(got, `"down":true`) {
		t.Errorf("back button: QEMU got %s, want its side button pressed", got)
	}
	for _, e := range []backend.InputEvent{
		{Kind: backend.EventMove, X: 1280, Y: 0},
		{Kind: backend.EventKey, Key: "no-such-key"},
		{Kind: "wobble"},
	} {
		if err := mon.SendEvent(ctx, e, 1280, 800); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", e, err)
		}
	}
}

// TestDirectAgent: programs run with the environment asked for (none
// added), a program ended by a signal exits 128+N, and Close lets go of
// the agent.
func TestDirectAgent(t *testing.T) {
	ctx := context.Background()
	peer := qgatest.NewPeer(t)
	var got qgatest.ExecRequest
	peer.SetExec(func(r qgatest.ExecRequest) qgatest.Process {
		got = r
		if r.Path == "kill" {
			return qgatest.Process{Signal: 9}
		}
		return qgatest.Process{Stdout: r.Input}
	})
	a := Direct{}.Agent(peer.SocketPath())
	res, err := a.Exec(ctx, backend.ExecRequest{Path: "cat", Env: []string{"A=b"}, Stdin: []byte("hi")})
	if err != nil || string(res.Stdout) != "hi" || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if strings.Join(got.Env, " ") != "A=b" || !got.CaptureOutput {
		t.Errorf("the agent got %+v", got)
	}
	if res, err := a.Exec(ctx, backend.ExecRequest{Path: "kill"}); err != nil || res.ExitCode != 128+9 {
		t.Errorf("a killed program: %+v %v", res, err)
	}
	a.Close()
	b := Direct{}.Agent(peer.SocketPath())
	defer b.Close()
	if err := b.Sync(ctx); err != nil || peer.Connections() != 2 {
		t.Fatalf("after Close: %v, %d connections", err, peer.Connections())
	}
}
