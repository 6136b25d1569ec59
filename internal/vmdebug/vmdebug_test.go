package vmdebug

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/drivers/qemu"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qga/qgatest"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp"
	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp/qmptest"
)

// The tests reach test peers of QEMU's sockets through the QEMU driver's
// side of the contract, as `hvkube debug` does.
var dial qemu.Direct

func TestExec(t *testing.T) {
	peer := qgatest.NewPeer(t)
	var got qgatest.ExecRequest
	peer.SetExec(func(r qgatest.ExecRequest) qgatest.Process {
		got = r
		if r.Path == "false" {
			return qgatest.Process{ExitCode: 1, Stderr: []byte("no\n")}
		}
		return qgatest.Process{Stdout: append([]byte("got "), r.Input...), RunningPolls: 2}
	})
	ctx := context.Background()
	res, err := Exec(ctx, dial, peer.SocketPath(), backend.ExecRequest{Path: "cat", Args: []string{"-"}, Env: []string{"A=B"}, Stdin: []byte("hi")})
	if err != nil || string(res.Stdout) != "got hi" || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if got.Path != "cat" || fmt.Sprint(got.Args) != "[-]" || fmt.Sprint(got.Env) != "[A=B]" || !got.CaptureOutput {
		t.Fatalf("the agent got %+v", got)
	}
	res, err = Exec(ctx, dial, peer.SocketPath(), backend.ExecRequest{Path: "false"})
	if err != nil || res.ExitCode != 1 || string(res.Stderr) != "no\n" {
		t.Fatalf("exec false: %+v %v", res, err)
	}
	// Every Exec lets go of the agent, which serves one client at a time.
	if _, err := Exec(ctx, dial, peer.SocketPath(), backend.ExecRequest{Path: "true"}); err != nil || peer.Connections() != 3 {
		t.Fatalf("third exec: %v, %d connections", err, peer.Connections())
	}
}

func TestWaitReady(t *testing.T) {
	peer := qgatest.NewPeer(t)
	var mu sync.Mutex
	runs := 0
	peer.SetExec(func(r qgatest.ExecRequest) qgatest.Process {
		mu.Lock()
		defer mu.Unlock()
		if r.Path != "/usr/local/bin/hvkube-ready" || !strings.Contains(strings.Join(r.Env, " "), "DISPLAY=:0") {
			return qgatest.Process{ExitCode: 127, Stderr: []byte("unexpected " + r.Path)}
		}
		if runs++; runs < 3 {
			return qgatest.Process{ExitCode: 1, Stderr: []byte("X is not up")}
		}
		return qgatest.Process{Stdout: []byte("ready 1280x800\n")}
	})
	var out, verbose bytes.Buffer
	err := WaitReady(context.Background(), dial, WaitOptions{QGA: peer.SocketPath(), Since: time.Now().Add(-time.Second), Timeout: 20 * time.Second,
		PID: os.Getpid(), Out: &out, Verbose: &verbose})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "guest agent answered after 1.") || !strings.Contains(out.String(), "(ready 1280x800)") {
		t.Fatalf("output %q", out.String())
	}
	if strings.Count(verbose.String(), "X is not up") != 2 {
		t.Fatalf("verbose output %q", verbose.String())
	}
	if peer.Connections() != 1 {
		t.Fatalf("%d connections: the wait keeps one", peer.Connections())
	}
}

func TestWaitReadyGivesUp(t *testing.T) {
	ctx := context.Background()
	// No agent at all: the timeout, with the last reason.
	start := time.Now()
	err := WaitReady(ctx, dial, WaitOptions{QGA: t.TempDir() + "/none.sock", Timeout: 1500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "not ready after 1.5s") || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("no agent: %v", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("gave up after %v", el)
	}
	if runtime.GOOS != "linux" {
		return
	}
	// QEMU exited (and is a zombie until its parent waits for it).
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	for alive(cmd.Process.Pid) {
		time.Sleep(10 * time.Millisecond)
	}
	err = WaitReady(ctx, dial, WaitOptions{QGA: t.TempDir() + "/none.sock", Timeout: time.Minute, PID: cmd.Process.Pid})
	if !errors.Is(err, errExited) {
		t.Fatalf("QEMU gone: %v", err)
	}
	// The caller gives up.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := WaitReady(cctx, dial, WaitOptions{QGA: t.TempDir() + "/none.sock", Timeout: time.Minute}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// qmpDesktop is a QMP test peer whose screendump writes a black w x h PPM
// and which records input-send-event.
func qmpDesktop(t *testing.T, w, h int) (*qmptest.Peer, *[]string) {
	peer := qmptest.NewPeer(t)
	var mu sync.Mutex
	var sent []string
	peer.Handle("screendump", func(_ context.Context, req qmptest.Request) (any, error) {
		var args struct {
			Filename string `json:"filename"`
		}
		json.Unmarshal(req.Arguments, &args)
		ppm := append([]byte(fmt.Sprintf("P6\n%d %d\n255\n", w, h)), make([]byte, 3*w*h)...)
		return nil, os.WriteFile(args.Filename, ppm, 0o644)
	})
	peer.Handle("input-send-event", func(_ context.Context, req qmptest.Request) (any, error) {
		var args struct {
			Events []struct {
				Type string `json:"type"`
				Data struct {
					Axis   string `json:"axis"`
					Value  int    `json:"value"`
					Down   bool   `json:"down"`
					Button string `json:"button"`
					Key    struct {
						Data string `json:"data"`
					} `json:"key"`
				} `json:"data"`
			} `json:"events"`
		}
		if err := json.Unmarshal(req.Arguments, &args); err != nil {
			return nil, err
		}
		var parts []string
		for _, e := range args.Events {
			sign := "-"
			if e.Data.Down {
				sign = "+"
			}
			switch e.Type {
			case "abs":
				parts = append(parts, fmt.Sprintf("%s=%d", e.Data.Axis, e.Data.Value))
			case "btn":
				parts = append(parts, "b"+sign+e.Data.Button)
			case "key":
				parts = append(parts, "k"+sign+e.Data.Key.Data)
			}
		}
		mu.Lock()
		sent = append(sent, strings.Join(parts, ","))
		mu.Unlock()
		return nil, nil
	})
	return peer, &sent
}

// TestDesktopInput: input goes through the action layer and the pointer
// mapping the backend uses (the right and bottom edges reach the tablet's
// maximum), one input-send-event per change.
func TestDesktopInput(t *testing.T) {
	peer, sent := qmpDesktop(t, 1280, 800)
	ctx := context.Background()
	mon, err := dial.DialMonitor(ctx, peer.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	acts := display.NewActions(&Desktop{Monitor: mon})
	if _, err := acts.Run(ctx, "", []api.Action{
		{Action: "left_click", Coordinate: []int{1279, 799}},
		{Action: "mouse_move", Coordinate: []int{640, 400}},
		{Action: "key", Text: "ctrl+s"},
	}, display.Space{}); err != nil {
		t.Fatal(err)
	}
	ax, ay := qmp.PixelToAbs(640, 400, 1280, 800)
	want := fmt.Sprintf("x=%d,y=%d b+left b-left x=%d,y=%d k+ctrl k+s k-s k-ctrl", qmp.AbsMax, qmp.AbsMax, ax, ay)
	if got := strings.Join(*sent, " "); got != want {
		t.Fatalf("sent\n got %s\nwant %s", got, want)
	}
	if _, err := acts.Do(ctx, "", api.Action{Action: "mouse_move", Coordinate: []int{1280, 0}}, display.Space{}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("a move off the screen: %v", err)
	}
	// The guest agent is needed for what xdotool does.
	if _, err := acts.Do(ctx, "", api.Action{Action: "cursor_position"}, display.Space{}); !errors.Is(err, api.ErrUnsupported) {
		t.Fatalf("cursor_position without the agent: %v", err)
	}
	img, _, err := (&Desktop{Monitor: mon}).Screenshot(ctx, "", backend.ScreenshotOptions{Format: "png", Width: 640})
	if err != nil || !bytes.HasPrefix(img, []byte("\x89PNG")) {
		t.Fatalf("screenshot: %d bytes, %v", len(img), err)
	}
}

func TestParse(t *testing.T) {
	x, y, err := parseMouseLocation("X=12\nY=34\nSCREEN=0\nWINDOW=4194316\n")
	if err != nil || x != 12 || y != 34 {
		t.Fatalf("parseMouseLocation: %d %d %v", x, y, err)
	}
	if _, _, err := parseMouseLocation("Error"); err == nil {
		t.Fatal("parseMouseLocation of nonsense")
	}
	out := `
xwininfo: Window id: 0x40000c "agent@linux-desktop: ~"

  Absolute upper-left X:  43
  Absolute upper-left Y:  64
  Relative upper-left X:  0
  Width: 904
  Height: 544
`
	if got := parseXwininfo(out, rect{}); got != (rect{43, 64, 904, 544}) {
		t.Fatalf("parseXwininfo: %+v", got)
	}
}
