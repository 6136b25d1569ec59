package qga

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/drivers/qemu/qga/qgatest"
)

func newClient(t *testing.T, p *qgatest.Peer, opts ...Option) *Client {
	t.Helper()
	c := New(p.SocketPath(), opts...)
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func count(cmds []string, name string) int {
	n := 0
	for _, c := range cmds {
		if c == name {
			n++
		}
	}
	return n
}

func TestSyncsOncePerConnection(t *testing.T) {
	p := qgatest.NewPeer(t)
	c := newClient(t, p)
	ctx := testCtx(t)
	if p.Connections() != 0 {
		t.Fatal("New dialled eagerly")
	}
	for range 3 {
		if err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"guest-sync-delimited", "guest-ping", "guest-ping", "guest-ping"}
	if got := p.Commands(); !slices.Equal(got, want) {
		t.Errorf("commands = %v, want %v", got, want)
	}
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := count(p.Commands(), "guest-sync-delimited"); got != 2 {
		t.Errorf("explicit Sync: %d syncs, want 2", got)
	}
}

func TestStaleBytesBeforeFirstRequest(t *testing.T) {
	p := qgatest.NewPeer(t)
	// Leftovers of an earlier client: a complete late reply, a stale sync
	// reply with another id, half a reply.
	p.SetStaleOnConnect([]byte("{\"return\": {\"pid\": 7}}\n\xff{\"return\": 42}\n{\"return\": {\"exi"))
	c := newClient(t, p)
	info, err := c.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != "7.2.0-qgatest" {
		t.Errorf("version = %q: the client took a stale reply", info.Version)
	}
	if !info.Enabled("guest-exec") || info.Enabled("guest-fsfreeze-freeze") || info.Enabled("nope") {
		t.Errorf("Enabled() wrong for %+v", info.Commands)
	}
}

func TestTimeoutThenResync(t *testing.T) {
	tests := []struct {
		name  string
		delay string // the command whose reply comes late
		first func(context.Context, *Client) error
	}{
		{"late reply", "guest-info", func(ctx context.Context, c *Client) error { _, err := c.Info(ctx); return err }},
		{"late sync reply", "guest-sync-delimited", func(ctx context.Context, c *Client) error { return c.Ping(ctx) }},
		{"late exec reply", "guest-exec", func(ctx context.Context, c *Client) error {
			_, err := c.ExecStart(ctx, ExecRequest{Path: "true"})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := qgatest.NewPeer(t)
			c := newClient(t, p)
			p.Delay(tt.delay, 200*time.Millisecond)

			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
			defer cancel()
			start := time.Now()
			if err := tt.first(ctx, c); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("first request = %v, want deadline exceeded", err)
			}
			if d := time.Since(start); d > 150*time.Millisecond {
				t.Errorf("timed-out request returned after %v", d)
			}

			// The late reply must not answer the next requests.
			p.Delay(tt.delay, 0)
			ctx = testCtx(t)
			tm := time.Unix(1_700_000_000, 5)
			if err := c.SetTime(ctx, tm); err != nil {
				t.Fatal(err)
			}
			got, err := c.Time(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tm) {
				t.Errorf("Time() = %v, want %v", got, tm)
			}
			info, err := c.Info(ctx)
			if err != nil || info.Version == "" {
				t.Errorf("Info after resync = %+v, %v", info, err)
			}
			cmds := p.Commands()
			if n := count(cmds, "guest-sync-delimited"); n < 2 {
				t.Errorf("commands %v: no resync after the timeout", cmds)
			}
			if p.Connections() != 1 {
				t.Errorf("%d connections: a timeout should resync, not redial", p.Connections())
			}
		})
	}
}

func TestCancelDuringRequest(t *testing.T) {
	p := qgatest.NewPeer(t)
	c := newClient(t, p)
	if err := c.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	p.Delay("guest-ping", 200*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	if err := c.Ping(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ping = %v, want canceled", err)
	}
	p.Delay("guest-ping", 0)
	if _, err := c.Info(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestWaitingForTheLockHonoursCtx(t *testing.T) {
	p := qgatest.NewPeer(t)
	c := newClient(t, p)
	p.Delay("guest-ping", 300*time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- c.Ping(testCtx(t)) }()
	time.Sleep(30 * time.Millisecond) // let it take the lock

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Info(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Info while another request runs = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Errorf("waiter gave up after %v", d)
	}
	if err := <-done; err != nil {
		t.Fatalf("the request holding the lock: %v", err)
	}
}

func TestConcurrentRequestsAreSerialised(t *testing.T) {
	p := qgatest.NewPeer(t)
	c := newClient(t, p)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := testCtx(t)
			want := fmt.Sprintf("input %d", i)
			res, err := c.Exec(ctx, ExecRequest{Path: "cat", Input: []byte(want), CaptureOutput: true})
			if err != nil {
				t.Error(err)
				return
			}
			if string(res.Stdout) != want {
				t.Errorf("goroutine %d got stdout %q", i, res.Stdout)
			}
			if err := c.Ping(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := count(p.Commands(), "guest-sync-delimited"); n != 1 {
		t.Errorf("%d syncs, want 1", n)
	}
}

func TestExec(t *testing.T) {
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	tests := []struct {
		name string
		proc qgatest.Process
		req  ExecRequest
		want ExecResult
	}{
		{
			name: "output and exit code",
			proc: qgatest.Process{ExitCode: 3, Stdout: []byte("out\n"), Stderr: []byte("err\n")},
			req:  ExecRequest{Path: "/bin/sh", Args: []string{"-c", "x"}, CaptureOutput: true},
			want: ExecResult{Exited: true, ExitCode: 3, Stdout: []byte("out\n"), Stderr: []byte("err\n")},
		},
		{
			name: "binary output after polls",
			proc: qgatest.Process{Stdout: binary, RunningPolls: 3},
			req:  ExecRequest{Path: "gen", CaptureOutput: true},
			want: ExecResult{Exited: true, Stdout: binary, Stderr: []byte{}},
		},
		{
			name: "killed by signal",
			proc: qgatest.Process{Signal: 9},
			req:  ExecRequest{Path: "sleep", CaptureOutput: true},
			want: ExecResult{Exited: true, Signal: 9, Stdout: []byte{}, Stderr: []byte{}},
		},
		{
			name: "truncated",
			proc: qgatest.Process{Stdout: []byte("lots"), Truncated: true},
			req:  ExecRequest{Path: "yes", CaptureOutput: true},
			want: ExecResult{Exited: true, Stdout: []byte("lots"), Stderr: []byte{}, Truncated: true},
		},
		{
			name: "output not captured",
			proc: qgatest.Process{Stdout: []byte("dropped")},
			req:  ExecRequest{Path: "true"},
			want: ExecResult{Exited: true, Stdout: []byte{}, Stderr: []byte{}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := qgatest.NewPeer(t)
			var gotReq qgatest.ExecRequest
			p.SetExec(func(r qgatest.ExecRequest) qgatest.Process {
				gotReq = r
				return tt.proc
			})
			c := newClient(t, p)
			res, err := c.Exec(testCtx(t), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if res.PID == 0 {
				t.Error("no pid")
			}
			tt.want.PID = res.PID
			if res.Exited != tt.want.Exited || res.ExitCode != tt.want.ExitCode || res.Signal != tt.want.Signal ||
				!bytes.Equal(res.Stdout, tt.want.Stdout) || !bytes.Equal(res.Stderr, tt.want.Stderr) || res.Truncated != tt.want.Truncated {
				t.Errorf("Exec = %+v\nwant %+v", res, tt.want)
			}
			if gotReq.Path != tt.req.Path || !slices.Equal(gotReq.Args, tt.req.Args) || gotReq.CaptureOutput != tt.req.CaptureOutput {
				t.Errorf("agent got %+v for %+v", gotReq, tt.req)
			}
			if got, want := count(p.Commands(), "guest-exec-status"), tt.proc.RunningPolls+1; got != want {
				t.Errorf("%d status polls, want %d", got, want)
			}
		})
	}
}

func TestExecPassesEnvAndInput(t *testing.T) {
	p := qgatest.NewPeer(t)
	var got qgatest.ExecRequest
	p.SetExec(func(r qgatest.ExecRequest) qgatest.Process { got = r; return qgatest.Process{} })
	c := newClient(t, p)
	req := ExecRequest{Path: "xdotool", Args: []string{"type", "--", "héllo"}, Env: []string{"DISPLAY=:0", "XAUTHORITY=/home/u/.Xauthority"}, Input: []byte{0, 1, 2, 0xff}}
	if _, err := c.Exec(testCtx(t), req); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Args, req.Args) || !slices.Equal(got.Env, req.Env) || !bytes.Equal(got.Input, req.Input) {
		t.Errorf("agent got %+v, want %+v", got, req)
	}
}

func TestExecErrors(t *testing.T) {
	p := qgatest.NewPeer(t)
	c := newClient(t, p)

	_, err := c.Exec(testCtx(t), ExecRequest{Path: "/nonexistent"})
	var ae *Error
	if !errors.As(err, &ae) || ae.Class != "GenericError" || !strings.Contains(ae.Desc, "No such file") {
		t.Errorf("exec of a missing program = %v, want an agent error", err)
	}
	if _, err := c.Exec(testCtx(t), ExecRequest{}); err == nil {
		t.Error("empty path accepted")
	}
	if _, err := c.ExecStatus(testCtx(t), 12345); !errors.As(err, &ae) {
		t.Errorf("status of an unknown pid = %v, want an agent error", err)
	}
	// Agent errors leave the stream in sync: no resync after them.
	if n := count(p.Commands(), "guest-sync-delimited"); n != 1 {
		t.Errorf("%d syncs after agent errors, want 1", n)
	}

	// A process that outlives ctx.
	p.SetExec(func(qgatest.ExecRequest) qgatest.Process { return qgatest.Process{RunningPolls: 1 << 30} })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
	defer cancel()
	res, err := c.Exec(ctx, ExecRequest{Path: "sleep"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Exec = %v, want deadline exceeded", err)
	}
	if res.PID == 0 || res.Exited {
		t.Errorf("result of a timed-out Exec = %+v, want its pid", res)
	}
}

func TestFileRead(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789abcdef\x00\xff"), 50)
	tests := []struct {
		name      string
		data      []byte
		chunk     int
		wantReads int
	}{
		{"chunked", content, 64, (len(content) + 63) / 64},
		{"exact multiple", content[:128], 64, 2},
		{"one chunk", content, DefaultChunkSize, 1},
		{"empty", []byte{}, 64, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := qgatest.NewPeer(t)
			p.SetFile("/etc/f", tt.data)
			c := newClient(t, p, WithChunkSize(tt.chunk))
			got, err := c.FileRead(testCtx(t), "/etc/f")
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.data) || got == nil {
				t.Errorf("read %d bytes (%v), want %d", len(got), got == nil, len(tt.data))
			}
			if n := count(p.Commands(), "guest-file-read"); n != tt.wantReads {
				t.Errorf("%d reads, want %d", n, tt.wantReads)
			}
			if n := p.OpenHandles(); n != 0 {
				t.Errorf("%d handles left open", n)
			}
		})
	}
}

func TestFileReadErrorsCloseHandle(t *testing.T) {
	p := qgatest.NewPeer(t)
	c := newClient(t, p, WithChunkSize(8))

	_, err := c.FileRead(testCtx(t), "/missing")
	var ae *Error
	if !errors.As(err, &ae) {
		t.Errorf("read of a missing file = %v, want an agent error", err)
	}

	p.SetFile("/big", bytes.Repeat([]byte("x"), 100))
	p.Delay("guest-file-read", 150*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.FileRead(ctx, "/big"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("FileRead = %v, want deadline exceeded", err)
	}
	if n := p.OpenHandles(); n != 0 {
		t.Errorf("%d handles left open after a timed-out read", n)
	}
	p.Delay("guest-file-read", 0)
	got, err := c.FileRead(testCtx(t), "/big")
	if err != nil || len(got) != 100 {
		t.Errorf("FileRead after the timeout = %d bytes, %v", len(got), err)
	}
}

func TestFileWrite(t *testing.T) {
	content := []byte("line one\nline two\n\x00\x01\x02binary\xff")
	tests := []struct {
		name       string
		data       []byte
		chunk      int
		wantWrites int
	}{
		{"chunked", content, 5, (len(content) + 4) / 5},
		{"one chunk", content, DefaultChunkSize, 1},
		{"empty creates the file", nil, 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := qgatest.NewPeer(t)
			p.SetFile("/tmp/out", []byte("old content that is longer than the new one"))
			c := newClient(t, p, WithChunkSize(tt.chunk))
			if err := c.FileWrite(testCtx(t), "/tmp/out", tt.data); err != nil {
				t.Fatal(err)
			}
			got, ok := p.File("/tmp/out")
			if !ok || !bytes.Equal(got, tt.data) {
				t.Errorf("file = %q (exists %v), want %q", got, ok, tt.data)
			}
			if n := count(p.Commands(), "guest-file-write"); n != tt.wantWrites {
				t.Errorf("%d writes, want %d", n, tt.wantWrites)
			}
			if n := p.OpenHandles(); n != 0 {
				t.Errorf("%d handles left open", n)
			}
		})
	}
}

func TestFileWriteTimeoutClosesHandle(t *testing.T) {
	p := qgatest.NewPeer(t)
	c := newClient(t, p, WithChunkSize(4))
	p.Delay("guest-file-write", 150*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.FileWrite(ctx, "/f", []byte("0123456789")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("FileWrite = %v, want deadline exceeded", err)
	}
	if n := p.OpenHandles(); n != 0 {
		t.Errorf("%d handles left open", n)
	}
}

func TestSetTime(t *testing.T) {
	p := qgatest.NewPeer(t)
	c := newClient(t, p)
	ctx := testCtx(t)
	want := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)
	if err := c.SetTime(ctx, want); err != nil {
		t.Fatal(err)
	}
	if got := p.Clock(); !got.Equal(want) {
		t.Errorf("agent clock = %v, want %v (nanoseconds kept)", got, want)
	}
	got, err := c.Time(ctx)
	if err != nil || !got.Equal(want) {
		t.Errorf("Time() = %v, %v; want %v", got, err, want)
	}
	if err := c.SetTime(ctx, time.Time{}); err != nil { // from the hardware clock
		t.Fatal(err)
	}
	if time.Since(p.Clock()) > time.Minute {
		t.Errorf("zero time did not ask the agent to use its hardware clock")
	}
}

func TestShutdown(t *testing.T) {
	p := qgatest.NewPeer(t)
	c := newClient(t, p)
	ctx := testCtx(t)
	if err := c.Shutdown(ctx, "reboot"); err != nil {
		t.Fatal(err)
	}
	// No reply comes; the next request must still work.
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if got := p.ShutdownMode(); got != "reboot" {
		t.Errorf("mode = %q, want reboot", got)
	}
	want := []string{"guest-sync-delimited", "guest-shutdown", "guest-sync-delimited", "guest-ping"}
	if got := p.Commands(); !slices.Equal(got, want) {
		t.Errorf("commands = %v, want %v", got, want)
	}
	if err := c.Shutdown(ctx, "explode"); err == nil {
		t.Error("bad mode accepted")
	}
	if err := c.Shutdown(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx); err != nil { // the agent has handled the shutdown once this answers
		t.Fatal(err)
	}
	if got := p.ShutdownMode(); got != "powerdown" {
		t.Errorf("default mode = %q, want powerdown", got)
	}
}

func TestRedialAfterConnectionLoss(t *testing.T) {
	p := qgatest.NewPeer(t)
	c := newClient(t, p)
	ctx := testCtx(t)
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	p.DropConnection()
	// The kept connection is dead; the request is retried on a new one.
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping after connection loss: %v", err)
	}
	if n := p.Connections(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

func TestConnectError(t *testing.T) {
	c := New(filepath.Join(t.TempDir(), "missing.sock"))
	defer c.Close()
	err := c.Ping(testCtx(t))
	if err == nil || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("Ping without a socket = %v", err)
	}
}

func TestCloseAndDisconnect(t *testing.T) {
	p := qgatest.NewPeer(t)
	c := newClient(t, p)
	ctx := testCtx(t)
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	c.Disconnect()
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if n := p.Connections(); n != 2 {
		t.Errorf("%d connections after Disconnect, want 2", n)
	}

	// Close fails a request in progress at once (a paused guest would
	// never answer it).
	p.Delay("guest-ping", 10*time.Second)
	done := make(chan error, 1)
	go func() { done <- c.Ping(ctx) }()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Errorf("request in progress during Close succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close waited %s for the request in progress", d)
	}
	if err := c.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := c.Ping(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Ping after Close = %v, want ErrClosed", err)
	}
	if err := c.Sync(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Close = %v, want ErrClosed", err)
	}
}

// TestExecSurvivesAbort: a status poll cut off by Abort (as a resume of a
// stopped guest does to the request its stop caught) is asked again on a
// new connection, and Exec returns the process's result.
func TestExecSurvivesAbort(t *testing.T) {
	p := qgatest.NewPeer(t)
	p.SetExec(func(qgatest.ExecRequest) qgatest.Process {
		return qgatest.Process{Stdout: []byte("done"), RunningPolls: 2}
	})
	p.Delay("guest-exec-status", 300*time.Millisecond)
	c := newClient(t, p)
	type result struct {
		res ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := c.Exec(testCtx(t), ExecRequest{Path: "sh", CaptureOutput: true})
		done <- result{res, err}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for count(p.Commands(), "guest-exec-status") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no status poll")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.Abort()
	p.Delay("guest-exec-status", 0)
	r := <-done
	if r.err != nil || !r.res.Exited || string(r.res.Stdout) != "done" {
		t.Fatalf("Exec after its poll was aborted = %+v, %v; want the process's result", r.res, r.err)
	}
	if got := p.Connections(); got < 2 {
		t.Errorf("%d connections, want the poll asked again on a new one", got)
	}
}
