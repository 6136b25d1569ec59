// Package conformance is the conformance suite every backend runs with a
// one-line test:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, opts) }
//
// It drives a real desktop: builds a template, clones sandboxes from it,
// and checks the contract of internal/backend through the screen, the
// keyboard, the mouse and the guest.
package conformance

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
	"github.com/hvkube/hvkube/internal/guest"
)

// Options describe the backend under test.
type Options struct {
	// New opens the backend on dir; calling it again on the same dir must
	// adopt what the first one left running (a server restart).
	New func(t *testing.T, dir string) backend.Backend
	// Template is the template to build.
	Template backend.TemplateSpec
	// Kill ends a sandbox's VM from outside, as a crash would.
	Kill func(t *testing.T, b backend.Backend, id string)
	// Leftovers lists what a deleted sandbox left behind (processes,
	// sockets, files); it must be empty after Delete. before is what
	// Inspect said just before the Delete.
	Leftovers func(t *testing.T, b backend.Backend, id string, before backend.Info) []string
	// Extra, if set, runs the backend's own subtests with the suite's
	// backend and template, before the restart test closes that backend.
	Extra func(t *testing.T, b backend.Backend, templateID string)
	// Timeout bounds the whole suite (default 20 minutes).
	Timeout time.Duration
	// OS is the template's guest, whose probes the suite looks inside
	// with (default Linux).
	OS guest.OS
	// Network, if set, runs the network case: the backend gives guests a
	// network with an egress policy (backend.SandboxSpec.Network).
	Network *NetworkOptions
}

// NetworkOptions say how a guest of the backend reaches the host.
type NetworkOptions struct {
	// HostAddress is the address the guest reaches the host's loopback
	// at (its gateway).
	HostAddress string
	// Fetch is a guest program that sends an HTTP/1.0 GET / to host:port
	// and prints the answer. When the connection is refused it exits with
	// RefusedExit and says "refused" (in any case) on stderr.
	Fetch       func(host string, port int) backend.ExecRequest
	RefusedExit int
}

// Run runs the suite.
func Run(t *testing.T, o Options) {
	if o.Timeout == 0 {
		o.Timeout = 20 * time.Minute
	}
	if o.OS == nil {
		o.OS = guest.NewLinux(nil)
	}
	probe := o.OS.Probes()
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	dir := t.TempDir()
	b := o.New(t, dir)
	t.Cleanup(func() { b.Close() })

	start := time.Now()
	info, err := b.BuildTemplate(ctx, o.Template, func(step string) { t.Logf("template: %s", step) })
	if err != nil {
		t.Fatalf("build template: %v", err)
	}
	t.Logf("template %s built in %s (boot %s)", info.ID, time.Since(start).Round(time.Millisecond), info.BootTime.Round(time.Millisecond))
	again, err := b.BuildTemplate(ctx, o.Template, nil)
	if err != nil || again.ID != info.ID {
		t.Fatalf("build template again (idempotent): %+v %v", again, err)
	}
	w, h, err := api.ParseResolution(info.Resolution)
	if err != nil {
		t.Fatalf("template resolution %q: %v", info.Resolution, err)
	}

	create := func(t *testing.T, id string) {
		t.Helper()
		got, err := b.Create(ctx, backend.SandboxSpec{ID: id, UID: "uid-" + id, TemplateID: info.ID})
		if err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		if got.State != backend.StatePaused {
			t.Fatalf("create %s: state %s, want Paused", id, got.State)
		}
		t.Cleanup(func() { b.Delete(context.Background(), id) })
	}
	resume := func(t *testing.T, id string) {
		t.Helper()
		if err := b.Resume(ctx, id); err != nil {
			t.Fatalf("resume %s: %v", id, err)
		}
	}
	exec := func(t *testing.T, id string, req backend.ExecRequest) backend.ExecResult {
		t.Helper()
		g := b.(backend.Guest)
		res, err := g.Exec(ctx, id, req)
		if err != nil {
			t.Fatalf("exec %s %v: %v", req.Path, req.Args, err)
		}
		return res
	}
	actions := display.NewActions(display.OnBackend(b))
	input := func(t *testing.T, id string, a api.Action) display.Result {
		t.Helper()
		res, err := actions.Do(ctx, id, a, display.Space{})
		if err != nil {
			t.Fatalf("input %+v: %v", a, err)
		}
		return res
	}

	t.Run("CreateLandsPausedAndResumes", func(t *testing.T) {
		create(t, "conf-life")
		again, err := b.Create(ctx, backend.SandboxSpec{ID: "conf-life", TemplateID: info.ID})
		if err != nil || again.State != backend.StatePaused {
			t.Fatalf("create again (idempotent): %+v %v", again, err)
		}
		resume(t, "conf-life")
		resume(t, "conf-life") // idempotent
		got, err := b.Inspect(ctx, "conf-life")
		if err != nil || got.State != backend.StateRunning || got.PID == 0 || got.Display == "" {
			t.Fatalf("inspect after resume: %+v %v", got, err)
		}
		if err := b.Ready(ctx, "conf-life"); err != nil {
			t.Fatalf("ready: %v", err)
		}
		if err := b.Alive(ctx, "conf-life"); err != nil {
			t.Fatalf("alive: %v", err)
		}
		if err := b.Pause(ctx, "conf-life"); err != nil {
			t.Fatal(err)
		}
		if err := b.Pause(ctx, "conf-life"); err != nil {
			t.Fatalf("pause again: %v", err)
		}
		if got, _ := b.Inspect(ctx, "conf-life"); got.State != backend.StatePaused {
			t.Fatalf("after pause: %s", got.State)
		}
		resume(t, "conf-life")
		// A clone takes its own identity shortly after its first resume.
		var host string
		for i := 0; i < 100; i++ {
			if host = strings.TrimSpace(probe.Text(exec(t, "conf-life", probe.Hostname()).Stdout)); strings.EqualFold(host, "conf-life") {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !strings.EqualFold(host, "conf-life") {
			t.Fatalf("the clone's hostname is %q, want conf-life", host)
		}
		// Each clone has its own machine (and boot) identity.
		ids := func(id string) []string {
			return strings.Fields(probe.Text(exec(t, id, probe.IDs()).Stdout))
		}
		create(t, "conf-twin")
		resume(t, "conf-twin")
		a, b2 := ids("conf-life"), ids("conf-twin")
		if len(a) == 0 || len(a) != len(b2) {
			t.Fatalf("identities: %q and %q", a, b2)
		}
		for i, f := range a {
			if f == b2[i] {
				t.Fatalf("two clones share identity %d (%s)", i, f)
			}
		}
		if err := b.Delete(ctx, "conf-twin"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("PauseDuringGuestCalls", func(t *testing.T) {
		// Guest calls caught by a pause must neither hold up the resume
		// nor stay stuck after it.
		create(t, "conf-busy")
		resume(t, "conf-busy")
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				b.Alive(cctx, "conf-busy")
				cancel()
			}
		}()
		for i := 0; i < 3; i++ {
			time.Sleep(200 * time.Millisecond)
			if err := b.Pause(ctx, "conf-busy"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := b.Resume(rctx, "conf-busy")
			cancel()
			if err != nil {
				t.Fatalf("resume %d with guest calls in flight: %v", i, err)
			}
		}
		close(stop)
		<-done
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := b.Alive(actx, "conf-busy"); err != nil {
			t.Fatalf("the guest agent after the resumes: %v", err)
		}
	})

	t.Run("Screenshot", func(t *testing.T) {
		create(t, "conf-screen")
		resume(t, "conf-screen")
		data, ctype, err := b.(backend.Screen).Screenshot(ctx, "conf-screen", backend.ScreenshotOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ctype != "image/png" {
			t.Fatalf("content type %q", ctype)
		}
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("not a PNG: %v", err)
		}
		if got := img.Bounds().Size(); got.X != w || got.Y != h {
			t.Fatalf("screenshot is %dx%d, want %dx%d", got.X, got.Y, w, h)
		}
		if n := colours(img); n < 3 {
			t.Fatalf("screenshot looks blank: %d colours", n)
		}
	})

	t.Run("TypeIntoTerminal", func(t *testing.T) {
		create(t, "conf-type")
		resume(t, "conf-type")
		input(t, "conf-type", api.Action{Action: "left_click", Coordinate: []int{w / 3, h / 3}})
		input(t, "conf-type", api.Action{Action: "type", Text: probe.TypedWrite("hvkube", probe.TempPath("t"))})
		input(t, "conf-type", api.Action{Action: "key", Text: "Return"})
		var got string
		for i := 0; i < 50; i++ {
			res := exec(t, "conf-type", probe.ReadFile(probe.TempPath("t")))
			if got = probe.Text(res.Stdout); res.ExitCode == 0 && got != "" {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if got != "hvkube\n" {
			t.Fatalf("%s = %q, want %q", probe.TempPath("t"), got, "hvkube\n")
		}
		// Shifted characters, and text beyond the keyboard map (typed
		// through the guest).
		texts := map[string]string{"u": `A_B "C" ~!@#$%^&*()`, "v": "héllo ✓"}
		for _, name := range []string{"u", "v"} {
			input(t, "conf-type", api.Action{Action: "type", Text: probe.TypedWrite(texts[name], probe.TempPath(name))})
			input(t, "conf-type", api.Action{Action: "key", Text: "Return"})
		}
		for name, text := range texts {
			file, want := probe.TempPath(name), text+"\n"
			for i := 0; i < 50; i++ {
				res := exec(t, "conf-type", probe.ReadFile(file))
				if got = probe.Text(res.Stdout); got == want {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if got != want {
				t.Errorf("%s = %q, want %q", file, got, want)
			}
		}
	})

	t.Run("ClickMovesPointer", func(t *testing.T) {
		create(t, "conf-click")
		resume(t, "conf-click")
		for _, p := range [][2]int{{123, 77}, {w - 1, h - 1}, {0, 0}, {w / 2, h / 2}} {
			input(t, "conf-click", api.Action{Action: "left_click", Coordinate: []int{p[0], p[1]}})
			if x, y, err := b.(backend.Cursor).CursorPosition(ctx, "conf-click"); err != nil || x != p[0] || y != p[1] {
				t.Fatalf("after a click at %v the guest says the pointer is at %d,%d (%v)", p, x, y, err)
			}
			pos := input(t, "conf-click", api.Action{Action: "cursor_position"})
			if len(pos.Coordinate) != 2 || pos.Coordinate[0] != p[0] || pos.Coordinate[1] != p[1] {
				t.Fatalf("cursor_position = %+v, want %v", pos, p)
			}
		}
	})

	t.Run("Clipboard", func(t *testing.T) {
		create(t, "conf-clip")
		resume(t, "conf-clip")
		g := b.(backend.Guest)
		want := "hvkube clipboard ✓ 'quotes' \"and\" $(no-shell)"
		if err := g.ClipboardSet(ctx, "conf-clip", want); err != nil {
			t.Fatal(err)
		}
		got, err := g.ClipboardGet(ctx, "conf-clip")
		if err != nil || got != want {
			t.Fatalf("clipboard = %q (%v), want %q", got, err, want)
		}
	})

	t.Run("SaveRestoreKeepsState", func(t *testing.T) {
		create(t, "conf-save")
		resume(t, "conf-save")
		g := b.(backend.Guest)
		kept := probe.TempPath("before-save")
		if err := g.CopyIn(ctx, "conf-save", kept, strings.NewReader("kept")); err != nil {
			t.Fatal(err)
		}
		exec(t, "conf-save", probe.Sync())
		if err := b.Save(ctx, "conf-save"); err != nil {
			t.Fatal(err)
		}
		if got, _ := b.Inspect(ctx, "conf-save"); got.State != backend.StateSaved || got.PID != 0 {
			t.Fatalf("after save: %+v", got)
		}
		if err := b.Save(ctx, "conf-save"); err != nil {
			t.Fatalf("save again: %v", err)
		}
		if err := b.Restore(ctx, "conf-save"); err != nil {
			t.Fatal(err)
		}
		if got, _ := b.Inspect(ctx, "conf-save"); got.State != backend.StatePaused {
			t.Fatalf("after restore: %s", got.State)
		}
		resume(t, "conf-save")
		var out bytes.Buffer
		if err := g.CopyOut(ctx, "conf-save", kept, &out); err != nil || out.String() != "kept" {
			t.Fatalf("file after restore: %q %v", out.String(), err)
		}
	})

	t.Run("ResetToClean", func(t *testing.T) {
		create(t, "conf-reset")
		resume(t, "conf-reset")
		after := probe.HomePath("after-checkpoint")
		exec(t, "conf-reset", probe.Touch(after))
		if err := b.Reset(ctx, "conf-reset"); err != nil {
			t.Fatal(err)
		}
		if got, _ := b.Inspect(ctx, "conf-reset"); got.State != backend.StatePaused {
			t.Fatalf("after reset: %s", got.State)
		}
		resume(t, "conf-reset")
		if res := exec(t, "conf-reset", probe.Exists(after)); res.ExitCode == 0 {
			t.Fatal("a file written after the clean checkpoint survived reset")
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		create(t, "conf-bad")
		resume(t, "conf-bad")
		in := b.(backend.Input)
		// The action layer checks actions; the backend checks raw events.
		raw := []struct {
			ev    backend.InputEvent
			field string
		}{
			{backend.InputEvent{Kind: backend.EventMove, X: w, Y: 1}, "events[0]"},
			{backend.InputEvent{Kind: backend.EventMove, X: 1, Y: -1}, "events[0]"},
			{backend.InputEvent{Kind: backend.EventKey, Key: "nosuchkey", Down: true}, "events[0].key"},
			{backend.InputEvent{Kind: backend.EventButton, Button: "thumb", Down: true}, "events[0].button"},
			{backend.InputEvent{Kind: "teleport"}, "events[0].kind"},
		}
		for _, c := range raw {
			err := in.SendInput(ctx, "conf-bad", []backend.InputEvent{c.ev})
			if !errors.Is(err, api.ErrInvalid) || api.FieldOf(err) != c.field {
				t.Errorf("event %+v: got %v (field %q), want ErrInvalid naming %s", c.ev, err, api.FieldOf(err), c.field)
			}
		}
		cases := []struct {
			a     api.Action
			field string
		}{
			{api.Action{Action: "left_click", Coordinate: []int{w, 10}}, "coordinate"},
			{api.Action{Action: "mouse_move", Coordinate: []int{-1, 10}}, "coordinate"},
			{api.Action{Action: "key", Text: "ctrl+nosuchkey"}, "text"},
			{api.Action{Action: "type", Text: ""}, "text"},
			{api.Action{Action: "scroll", Coordinate: []int{1, 1}, ScrollDirection: "sideways"}, "scroll_direction"},
			{api.Action{Action: "teleport"}, "action"},
		}
		for _, c := range cases {
			_, err := actions.Do(ctx, "conf-bad", c.a, display.Space{})
			if !errors.Is(err, api.ErrInvalid) || api.FieldOf(err) != c.field {
				t.Errorf("input %+v: got %v (field %q), want ErrInvalid naming %s", c.a, err, api.FieldOf(err), c.field)
			}
		}
		if err := in.SendInput(ctx, "no-such-sandbox", []backend.InputEvent{{Kind: backend.EventMove, X: 1, Y: 1}}); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("unknown sandbox: %v", err)
		}
		if err := b.Resume(ctx, "no-such-sandbox"); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("resume unknown sandbox: %v", err)
		}
		if _, err := b.Inspect(ctx, "no-such-sandbox"); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("inspect unknown sandbox: %v", err)
		}
	})

	t.Run("DeleteLeavesNothing", func(t *testing.T) {
		create(t, "conf-del")
		resume(t, "conf-del")
		before, err := b.Inspect(ctx, "conf-del")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(ctx, "conf-del"); err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(ctx, "conf-del"); err != nil {
			t.Fatalf("delete again: %v", err)
		}
		if _, err := b.Inspect(ctx, "conf-del"); !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("inspect after delete: %v", err)
		}
		if o.Leftovers != nil {
			if left := o.Leftovers(t, b, "conf-del", before); len(left) > 0 {
				t.Fatalf("delete left %v", left)
			}
		}
	})

	t.Run("KilledVMIsGone", func(t *testing.T) {
		if o.Kill == nil {
			t.Skip("the backend gives no way to kill a VM from outside")
		}
		create(t, "conf-kill")
		resume(t, "conf-kill")
		o.Kill(t, b, "conf-kill")
		got, err := b.Inspect(ctx, "conf-kill")
		if err != nil {
			t.Fatal(err)
		}
		if got.State == backend.StateRunning || got.State == backend.StatePaused || got.PID != 0 {
			t.Fatalf("inspect after kill: %+v, want it gone", got)
		}
		if err := b.Resume(ctx, "conf-kill"); err == nil {
			t.Fatal("resume of a killed VM succeeded")
		}
	})

	t.Run("NetworkEgress", func(t *testing.T) {
		if o.Network == nil {
			t.Skip("the backend gives guests no network")
		}
		if !info.Network {
			t.Skip("the template's snapshot has no network device (its image declares no network)")
		}
		nw := o.Network
		serve := func(body string) int {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
			t.Cleanup(srv.Close)
			return srv.Listener.Addr().(*net.TCPAddr).Port
		}
		allowed, other := serve("allowed"), serve("not allowed")
		spec := backend.SandboxSpec{ID: "conf-net", UID: "uid-conf-net", TemplateID: info.ID,
			Network: api.Network{Egress: api.Egress{Allow: []string{"127.0.0.1:" + strconv.Itoa(allowed)}}}}
		if _, err := b.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Delete(context.Background(), "conf-net") })
		resume(t, "conf-net")
		// Right after the first resume: nothing to wait for.
		if res := exec(t, "conf-net", nw.Fetch(nw.HostAddress, allowed)); res.ExitCode != 0 || !strings.HasSuffix(string(res.Stdout), "allowed") {
			t.Fatalf("fetch from an allowed host port: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		res := exec(t, "conf-net", nw.Fetch(nw.HostAddress, other))
		if res.ExitCode != nw.RefusedExit || !strings.Contains(strings.ToLower(string(res.Stderr)), "refused") {
			t.Fatalf("fetch from a host port not allowed: exit %d, %q %q; want refused (exit %d)", res.ExitCode, res.Stdout, res.Stderr, nw.RefusedExit)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			got, err := b.Inspect(ctx, "conf-net")
			if err != nil {
				t.Fatal(err)
			}
			if n := got.Network; n != nil && n.Denied >= 1 && n.LastDenied != nil && strings.HasSuffix(n.LastDenied.Destination, ":"+strconv.Itoa(other)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the refused connection is not reported: %+v", got.Network)
			}
		}
	})

	if o.Extra != nil {
		o.Extra(t, b, info.ID)
	}

	t.Run("RestartAdopts", func(t *testing.T) {
		create(t, "conf-adopt")
		resume(t, "conf-adopt")
		before, _ := b.Inspect(ctx, "conf-adopt")
		// The old server goes away (its connections with it); the VM stays.
		b.Close()
		b2 := o.New(t, dir)
		defer b2.Close()
		var found *backend.Info
		list, err := b2.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range list {
			if list[i].ID == "conf-adopt" {
				found = &list[i]
			}
		}
		if found == nil || found.State != backend.StateRunning || found.PID != before.PID {
			t.Fatalf("after a restart the backend sees %+v, want the running VM %d", found, before.PID)
		}
		if err := b2.Ready(ctx, "conf-adopt"); err != nil {
			t.Fatalf("ready through the adopting backend: %v", err)
		}
		if err := b2.Delete(ctx, "conf-adopt"); err != nil {
			t.Fatal(err)
		}
	})
}

// colours counts distinct colours, up to 16.
func colours(img image.Image) int {
	seen := map[[3]uint32]bool{}
	bnd := img.Bounds()
	for y := bnd.Min.Y; y < bnd.Max.Y; y += 7 {
		for x := bnd.Min.X; x < bnd.Max.X; x += 7 {
			r, g, b, _ := img.At(x, y).RGBA()
			seen[[3]uint32{r, g, b}] = true
			if len(seen) >= 16 {
				return len(seen)
			}
		}
	}
	return len(seen)
}
