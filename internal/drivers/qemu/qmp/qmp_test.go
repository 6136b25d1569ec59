package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/drivers/qemu/qmp/qmptest"
)

func dial(t *testing.T, p *qmptest.Peer) *Monitor {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := Dial(ctx, p.SocketPath())
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func pendingCount(m *Monitor) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pending)
}

func TestDialNegotiates(t *testing.T) {
	p := qmptest.NewPeer(t)
	m := dial(t, p)

	if got, want := m.Version(), (Version{Major: 7, Minor: 2, Package: "qmptest"}); got != want {
		t.Errorf("Version() = %+v, want %+v", got, want)
	}
	reqs := p.Requests()
	if len(reqs) != 1 || reqs[0].Command != "qmp_capabilities" {
		t.Fatalf("requests after Dial = %+v, want just qmp_capabilities", reqs)
	}
	if string(reqs[0].ID) == "" {
		t.Errorf("qmp_capabilities sent without id")
	}
}

func TestVersionAtLeast(t *testing.T) {
	v := Version{Major: 7, Minor: 2, Micro: 22}
	tests := []struct {
		major, minor int
		want         bool
	}{
		{7, 2, true}, {7, 1, true}, {6, 9, true}, {7, 3, false}, {8, 0, false},
	}
	for _, tt := range tests {
		if got := v.AtLeast(tt.major, tt.minor); got != tt.want {
			t.Errorf("%v.AtLeast(%d, %d) = %v, want %v", v, tt.major, tt.minor, got, tt.want)
		}
	}
	if got, want := v.String(), "7.2.22"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestDialErrors(t *testing.T) {
	t.Run("no socket", func(t *testing.T) {
		_, err := Dial(testCtx(t), filepath.Join(t.TempDir(), "missing.sock"))
		if err == nil {
			t.Fatal("Dial to a missing socket succeeded")
		}
	})
	t.Run("silent server times out", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "silent.sock")
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				defer c.Close()
				io.Copy(io.Discard, c) // never greets
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = Dial(ctx, path)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Dial = %v, want deadline exceeded", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Dial took %v to honour a 100ms deadline", d)
		}
	})
	t.Run("cancelled while waiting for greeting", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "silent.sock")
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				defer c.Close()
				io.Copy(io.Discard, c)
			}
		}()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err = Dial(ctx, path)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Dial = %v, want canceled", err)
		}
	})
	t.Run("not a greeting", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "odd.sock")
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				defer c.Close()
				io.WriteString(c, `{"return": {}}`+"\r\n")
				io.Copy(io.Discard, c)
			}
		}()
		_, err = Dial(testCtx(t), path)
		if err == nil {
			t.Fatal("Dial accepted a server that does not greet")
		}
	})
	t.Run("capabilities refused", func(t *testing.T) {
		p := qmptest.NewPeer(t)
		p.Handle("qmp_capabilities", func(context.Context, qmptest.Request) (any, error) {
			return nil, &qmptest.Error{Class: "GenericError", Desc: "nope"}
		})
		_, err := Dial(testCtx(t), p.SocketPath())
		var qe *Error
		if !errors.As(err, &qe) || qe.Desc != "nope" {
			t.Fatalf("Dial = %v, want the qmp_capabilities error", err)
		}
	})
}

func TestExecuteArgumentsAndResult(t *testing.T) {
	p := qmptest.NewPeer(t)
	p.Handle("echo", func(_ context.Context, req qmptest.Request) (any, error) {
		return req.Arguments, nil
	})
	m := dial(t, p)

	var got struct {
		A string `json:"a"`
		B int    `json:"b"`
	}
	if err := m.Execute(testCtx(t), "echo", map[string]any{"a": "x", "b": 2}, &got); err != nil {
		t.Fatal(err)
	}
	if got.A != "x" || got.B != 2 {
		t.Errorf("echo result = %+v, want {a:x b:2}", got)
	}

	// No arguments: the member is omitted, not null.
	if err := m.Execute(testCtx(t), "query-status", nil, nil); err != nil {
		t.Fatal(err)
	}
	reqs := p.Requests()
	if last := reqs[len(reqs)-1]; last.Arguments != nil {
		t.Errorf("arguments sent for a nil args: %s", last.Arguments)
	}

	// Reply that does not fit the result.
	var n int
	err := m.Execute(testCtx(t), "echo", map[string]any{"a": 1}, &n)
	if err == nil {
		t.Error("decoding an object into an int succeeded")
	}
}

func TestConcurrentExecuteRoutesByID(t *testing.T) {
	p := qmptest.NewPeer(t)
	p.Handle("echo", func(_ context.Context, req qmptest.Request) (any, error) {
		var args struct{ N int }
		json.Unmarshal(req.Arguments, &args)
		// Later requests answer sooner, so replies come back out of order.
		time.Sleep(time.Duration(50-args.N) * 200 * time.Microsecond)
		return map[string]int{"n": args.N}, nil
	})
	m := dial(t, p)

	const calls = 50
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var got struct{ N int }
			if err := m.Execute(testCtx(t), "echo", map[string]int{"n": i}, &got); err != nil {
				errs <- err
				return
			}
			if got.N != i {
				errs <- fmt.Errorf("call %d got the reply for %d", i, got.N)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := pendingCount(m); n != 0 {
		t.Errorf("%d calls still pending", n)
	}
}

func TestOutOfOrderReplies(t *testing.T) {
	p := qmptest.NewPeer(t)
	release := make(chan struct{})
	p.Handle("slow", func(ctx context.Context, _ qmptest.Request) (any, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return "slow", nil
	})
	p.Handle("fast", func(context.Context, qmptest.Request) (any, error) { return "fast", nil })
	m := dial(t, p)

	slowDone := make(chan string, 1)
	go func() {
		var s string
		if err := m.Execute(testCtx(t), "slow", nil, &s); err != nil {
			s = err.Error()
		}
		slowDone <- s
	}()
	var s string
	if err := m.Execute(testCtx(t), "fast", nil, &s); err != nil || s != "fast" {
		t.Fatalf("fast = %q, %v while slow is pending", s, err)
	}
	select {
	case got := <-slowDone:
		t.Fatalf("slow finished before release: %q", got)
	default:
	}
	close(release)
	if got := <-slowDone; got != "slow" {
		t.Errorf("slow = %q, want slow", got)
	}
}

func TestCancelledCallDropsLateReply(t *testing.T) {
	p := qmptest.NewPeer(t)
	release := make(chan struct{})
	p.Handle("slow", func(ctx context.Context, _ qmptest.Request) (any, error) {
		<-release
		return "late", nil
	})
	p.Handle("fast", func(context.Context, qmptest.Request) (any, error) { return "fast", nil })
	m := dial(t, p)

	tests := []struct {
		name   string
		ctx    func() (context.Context, context.CancelFunc)
		target error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 30*time.Millisecond)
		}, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(30*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			var s string
			err := m.Execute(ctx, "slow", nil, &s)
			if !errors.Is(err, tt.target) {
				t.Fatalf("Execute = %v, want %v", err, tt.target)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("cancelled Execute returned after %v", d)
			}
			if n := pendingCount(m); n != 0 {
				t.Errorf("%d calls pending after cancellation", n)
			}
		})
	}

	// Let the late replies arrive, then check a new call gets its own reply.
	close(release)
	for range 20 {
		var s string
		if err := m.Execute(testCtx(t), "fast", nil, &s); err != nil || s != "fast" {
			t.Fatalf("after late replies: fast = %q, %v", s, err)
		}
	}
}

func TestAlreadyCancelledContext(t *testing.T) {
	p := qmptest.NewPeer(t)
	m := dial(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := len(p.Requests())
	if err := m.Execute(ctx, "query-status", nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Execute = %v, want canceled", err)
	}
	if err := m.Execute(testCtx(t), "query-status", nil, nil); err != nil {
		t.Fatalf("next Execute: %v", err)
	}
	if got := len(p.Requests()) - before; got != 1 {
		t.Errorf("%d requests reached the peer, want 1 (the cancelled one is never sent)", got)
	}
}

func TestErrorReply(t *testing.T) {
	p := qmptest.NewPeer(t)
	p.Handle("fail", func(context.Context, qmptest.Request) (any, error) {
		return nil, &qmptest.Error{Class: "DeviceNotFound", Desc: "Device 'x' not found"}
	})
	m := dial(t, p)

	tests := []struct {
		command   string
		wantClass string
	}{
		{"fail", "DeviceNotFound"},
		{"no-such-command", "CommandNotFound"},
	}
	for _, tt := range tests {
		err := m.Execute(testCtx(t), tt.command, nil, nil)
		var qe *Error
		if !errors.As(err, &qe) {
			t.Fatalf("%s: error %v is not a *qmp.Error", tt.command, err)
		}
		if qe.Class != tt.wantClass {
			t.Errorf("%s: class = %q, want %q", tt.command, qe.Class, tt.wantClass)
		}
		if qe.Desc == "" {
			t.Errorf("%s: empty desc", tt.command)
		}
	}
	// The monitor keeps working after error replies.
	if _, err := m.Status(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestStrayRepliesIgnored(t *testing.T) {
	p := qmptest.NewPeer(t)
	m := dial(t, p)
	p.SendRaw(`{"return": {}, "id": 999999}` + "\r\n")                                     // nobody waits for this id
	p.SendRaw(`{"return": {}, "id": "not-ours"}` + "\r\n")                                 // not an id this client sends
	p.SendRaw(`{"error": {"class": "GenericError", "desc": "JSON parse error"}}` + "\r\n") // no id
	st, err := m.Status(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != StatePrelaunch {
		t.Errorf("status = %q, want prelaunch", st.Status)
	}
}

func TestStatusStopCont(t *testing.T) {
	p := qmptest.NewPeer(t)
	m := dial(t, p)
	ctx := testCtx(t)
	sub := m.Subscribe("STOP", "RESUME")
	defer sub.Cancel()

	steps := []struct {
		do        func(context.Context) error
		wantState RunState
		wantEvent string
	}{
		{m.Cont, StateRunning, "RESUME"},
		{m.Stop, StatePaused, "STOP"},
		{m.Cont, StateRunning, "RESUME"},
	}
	for i, s := range steps {
		if err := s.do(ctx); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		st, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != s.wantState || st.Running != (s.wantState == StateRunning) {
			t.Errorf("step %d: status = %+v, want %s", i, st, s.wantState)
		}
		select {
		case ev := <-sub.C:
			if ev.Name != s.wantEvent {
				t.Errorf("step %d: event %s, want %s", i, ev.Name, s.wantEvent)
			}
		case <-ctx.Done():
			t.Fatalf("step %d: no %s event", i, s.wantEvent)
		}
	}
}

func TestEvents(t *testing.T) {
	p := qmptest.NewPeer(t)
	m := dial(t, p)
	all := m.Subscribe()
	defer all.Cancel()
	onlyMig := m.Subscribe("MIGRATION")
	defer onlyMig.Cancel()

	p.Emit("RESET", map[string]any{"guest": true})
	p.Emit("MIGRATION", map[string]any{"status": "active"})
	p.SendRaw(`{"event": "POWERDOWN"}` + "\r\n") // no data, no timestamp

	wantAll := []string{"RESET", "MIGRATION", "POWERDOWN"}
	for _, want := range wantAll {
		select {
		case ev := <-all.C:
			if ev.Name != want {
				t.Errorf("event %s, want %s", ev.Name, want)
			}
			switch ev.Name {
			case "RESET":
				if string(ev.Data) != `{"guest":true}` {
					t.Errorf("RESET data = %s", ev.Data)
				}
				if time.Since(ev.Timestamp) > time.Minute {
					t.Errorf("RESET timestamp = %v", ev.Timestamp)
				}
			case "POWERDOWN":
				if ev.Data != nil || !ev.Timestamp.IsZero() {
					t.Errorf("POWERDOWN = %+v, want no data and zero time", ev)
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s event", want)
		}
	}
	select {
	case ev := <-onlyMig.C:
		var d struct{ Status string }
		if err := json.Unmarshal(ev.Data, &d); err != nil || ev.Name != "MIGRATION" || d.Status != "active" {
			t.Errorf("filtered event = %s %s", ev.Name, ev.Data)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no MIGRATION event on the filtered subscription")
	}
	select {
	case ev := <-onlyMig.C:
		t.Errorf("filtered subscription got %s", ev.Name)
	case <-time.After(20 * time.Millisecond):
	}

	onlyMig.Cancel()
	onlyMig.Cancel() // idempotent
	if _, ok := <-onlyMig.C; ok {
		t.Error("channel open after Cancel")
	}
}

func TestSlowSubscriberDoesNotBlock(t *testing.T) {
	p := qmptest.NewPeer(t)
	m := dial(t, p)
	slow := m.Subscribe() // never read
	defer slow.Cancel()
	fast := m.Subscribe("TICK")
	defer fast.Cancel()

	const n = 3 * EventBuffer
	for i := range n {
		p.Emit("TICK", nil)
		// Lockstep with the fast subscriber, so it never falls behind
		// while the slow one's buffer overflows.
		select {
		case <-fast.C:
		case <-time.After(5 * time.Second):
			t.Fatalf("fast subscriber starved at event %d", i)
		}
	}
	// Replies still flow while the slow subscriber's buffer is full.
	if _, err := m.Status(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := fast.Dropped(); got != 0 {
		t.Errorf("fast.Dropped() = %d, want 0", got)
	}
	if got, want := slow.Dropped(), uint64(n-EventBuffer); got != want {
		t.Errorf("slow.Dropped() = %d, want %d", got, want)
	}
	if len(slow.C) != EventBuffer {
		t.Errorf("slow subscriber buffered %d, want %d", len(slow.C), EventBuffer)
	}
}

func TestConnectionLost(t *testing.T) {
	p := qmptest.NewPeer(t)
	started := make(chan struct{})
	p.Handle("hang", func(ctx context.Context, _ qmptest.Request) (any, error) {
		close(started)
		<-ctx.Done()
		return nil, nil
	})
	m := dial(t, p)
	sub := m.Subscribe()

	errc := make(chan error, 1)
	go func() { errc <- m.Execute(context.Background(), "hang", nil, nil) }()
	<-started
	p.DropConnection()

	select {
	case err := <-errc:
		if !errors.Is(err, io.EOF) {
			t.Errorf("pending call = %v, want io.EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pending call not failed after connection loss")
	}
	select {
	case <-m.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed")
	}
	if err := m.Err(); !errors.Is(err, io.EOF) {
		t.Errorf("Err() = %v, want io.EOF", err)
	}
	if err := m.Cont(testCtx(t)); !errors.Is(err, io.EOF) {
		t.Errorf("call after loss = %v, want io.EOF", err)
	}
	if _, ok := <-sub.C; ok {
		t.Error("subscription still open after connection loss")
	}
	sub.Cancel() // harmless after the monitor stopped
	late := m.Subscribe()
	if _, ok := <-late.C; ok {
		t.Error("subscription to a stopped monitor is open")
	}
	m.Close()
	if err := m.Err(); !errors.Is(err, io.EOF) {
		t.Errorf("Close replaced the reason: %v", err)
	}
}

func TestClose(t *testing.T) {
	p := qmptest.NewPeer(t)
	started := make(chan struct{})
	p.Handle("hang", func(ctx context.Context, _ qmptest.Request) (any, error) {
		close(started)
		<-ctx.Done()
		return nil, nil
	})
	m := dial(t, p)

	errc := make(chan error, 1)
	go func() { errc <- m.Execute(context.Background(), "hang", nil, nil) }()
	<-started
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Errorf("pending call = %v, want net.ErrClosed", err)
	}
	select {
	case <-m.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if err := m.Stop(testCtx(t)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("call after Close = %v, want net.ErrClosed", err)
	}
}

func TestQuit(t *testing.T) {
	p := qmptest.NewPeer(t)
	m := dial(t, p)
	sub := m.Subscribe("SHUTDOWN")
	if err := m.Quit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Done():
	default:
		t.Fatal("Done not closed after Quit returned")
	}
	ev, ok := <-sub.C
	if !ok || ev.Name != "SHUTDOWN" {
		t.Errorf("first event after quit = %+v, %v; want SHUTDOWN", ev, ok)
	}
}

func TestInputEventJSON(t *testing.T) {
	tests := []struct {
		name string
		ev   InputEvent
		want string
	}{
		{"key down", KeyDown("ctrl"), `{"type":"key","data":{"key":{"type":"qcode","data":"ctrl"},"down":true}}`},
		{"key up", KeyUp("a"), `{"type":"key","data":{"key":{"type":"qcode","data":"a"},"down":false}}`},
		{"button down", ButtonDown(ButtonLeft), `{"type":"btn","data":{"button":"left","down":true}}`},
		{"wheel up", ButtonUp(ButtonWheelDown), `{"type":"btn","data":{"button":"wheel-down","down":false}}`},
		{"abs x", AbsMove(1, 2)[0], `{"type":"abs","data":{"axis":"x","value":1}}`},
		{"abs y", AbsMove(1, 2)[1], `{"type":"abs","data":{"axis":"y","value":2}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.ev)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestInputSendEvent(t *testing.T) {
	p := qmptest.NewPeer(t)
	var mu sync.Mutex
	var got []json.RawMessage
	p.Handle("input-send-event", func(_ context.Context, req qmptest.Request) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, req.Arguments)
		return nil, nil
	})
	m := dial(t, p)

	events := append(AbsMove(0, AbsMax), ButtonDown(ButtonRight))
	if err := m.InputSendEvent(testCtx(t), events); err != nil {
		t.Fatal(err)
	}
	want := `{"events":[{"type":"abs","data":{"axis":"x","value":0}},{"type":"abs","data":{"axis":"y","value":32767}},{"type":"btn","data":{"button":"right","down":true}}]}`
	if len(got) != 1 || string(got[0]) != want {
		t.Errorf("arguments = %s\nwant %s", got, want)
	}

	bad := []struct {
		name   string
		events []InputEvent
	}{
		{"none", nil},
		{"abs too big", AbsMove(AbsMax+1, 0)},
		{"abs negative", AbsMove(0, -1)},
		{"bad axis", []InputEvent{{Type: InputAbs, Axis: "z"}}},
		{"key without key", []InputEvent{{Type: InputKey, Down: true}}},
		{"btn without button", []InputEvent{{Type: InputBtn}}},
		{"unknown type", []InputEvent{{Type: "rel"}}},
	}
	for _, tt := range bad {
		if err := m.InputSendEvent(testCtx(t), tt.events); err == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
	if len(got) != 1 {
		t.Errorf("invalid events reached the peer: %d calls", len(got))
	}
}

func TestScreendumpAndMigrateArguments(t *testing.T) {
	p := qmptest.NewPeer(t)
	var mu sync.Mutex
	args := map[string]string{}
	record := func(_ context.Context, req qmptest.Request) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		args[req.Command] = string(req.Arguments)
		return nil, nil
	}
	for _, c := range []string{"screendump", "migrate", "migrate-incoming", "migrate-set-capabilities", "migrate-set-parameters", "closefd", "migrate_cancel"} {
		p.Handle(c, record)
	}
	m := dial(t, p)
	ctx := testCtx(t)
	calls := []func() error{
		func() error { return m.ScreendumpPPM(ctx, "/tmp/x.ppm") },
		func() error { return m.Migrate(ctx, "fd:mig") },
		func() error { return m.MigrateIncoming(ctx, "exec:cat f") },
		func() error {
			return m.MigrateSetCapabilities(ctx, map[string]bool{"x-ignore-shared": true, "events": false})
		},
		func() error { return m.MigrateSetParameters(ctx, map[string]any{"max-bandwidth": int64(1) << 33}) },
		func() error { return m.CloseFD(ctx, "mig") },
		func() error { return m.MigrateCancel(ctx) },
	}
	for i, c := range calls {
		if err := c(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	want := map[string]string{
		"screendump":               `{"filename":"/tmp/x.ppm"}`,
		"migrate":                  `{"uri":"fd:mig"}`,
		"migrate-incoming":         `{"uri":"exec:cat f"}`,
		"migrate-set-capabilities": `{"capabilities":[{"capability":"events","state":false},{"capability":"x-ignore-shared","state":true}]}`,
		"migrate-set-parameters":   `{"max-bandwidth":8589934592}`,
		"closefd":                  `{"fdname":"mig"}`,
		"migrate_cancel":           ``,
	}
	for cmd, w := range want {
		if got := args[cmd]; got != w {
			t.Errorf("%s arguments = %s, want %s", cmd, got, w)
		}
	}
}

func TestWaitMigration(t *testing.T) {
	tests := []struct {
		name       string
		replies    []string
		events     bool
		wantStatus MigrationStatus
		wantFailed bool
	}{
		{
			name:       "completes",
			replies:    []string{`{}`, `{"status":"setup"}`, `{"status":"active","ram":{"transferred":10,"total":100}}`, `{"status":"completed","total-time":42,"ram":{"transferred":100,"total":100}}`},
			wantStatus: MigrationCompleted,
		},
		{
			name:       "completes with events",
			replies:    []string{`{"status":"active"}`, `{"status":"completed"}`},
			events:     true,
			wantStatus: MigrationCompleted,
		},
		{
			name:       "fails",
			replies:    []string{`{"status":"active"}`, `{"status":"failed","error-desc":"Unable to write to command: Broken pipe"}`},
			wantStatus: MigrationFailed,
			wantFailed: true,
		},
		{
			name:       "cancelled",
			replies:    []string{`{"status":"cancelling"}`, `{"status":"cancelled"}`},
			wantStatus: MigrationCancelled,
			wantFailed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := qmptest.NewPeer(t)
			var mu sync.Mutex
			i := 0
			p.Handle("query-migrate", func(context.Context, qmptest.Request) (any, error) {
				mu.Lock()
				defer mu.Unlock()
				r := tt.replies[min(i, len(tt.replies)-1)]
				i++
				if tt.events && i < len(tt.replies) {
					// Tell the waiter the state changed.
					go p.Emit("MIGRATION", map[string]string{"status": "x"})
				}
				return json.RawMessage(r), nil
			})
			m := dial(t, p)
			info, err := m.WaitMigration(testCtx(t))
			if info.Status != tt.wantStatus {
				t.Errorf("status = %s, want %s", info.Status, tt.wantStatus)
			}
			if got := errors.Is(err, ErrMigrationFailed); got != tt.wantFailed {
				t.Errorf("err = %v, want failed=%v", err, tt.wantFailed)
			}
			if !tt.wantFailed && err != nil {
				t.Errorf("err = %v", err)
			}
			if tt.name == "fails" && err != nil && !strings.Contains(err.Error(), "Broken pipe") {
				t.Errorf("error %q does not carry QEMU's reason", err)
			}
		})
	}

	t.Run("ctx ends", func(t *testing.T) {
		p := qmptest.NewPeer(t)
		p.Handle("query-migrate", func(context.Context, qmptest.Request) (any, error) {
			return json.RawMessage(`{"status":"active"}`), nil
		})
		m := dial(t, p)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := m.WaitMigration(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want deadline exceeded", err)
		}
	})
}
