package fake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/capacity"
	"github.com/hvkube/hvkube/internal/display"
)

const tplID = "tpl"

// newBackend returns a fake with the template tplID (512 MB, 1280x800).
func newBackend(t *testing.T, opts Options) *Backend {
	t.Helper()
	b := New(opts)
	if _, err := b.BuildTemplate(context.Background(), backend.TemplateSpec{ID: tplID}, nil); err != nil {
		t.Fatal(err)
	}
	return b
}

// inState creates sandbox id and brings it to state.
func inState(t *testing.T, b *Backend, id, state string) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.Create(ctx, backend.SandboxSpec{ID: id, UID: "uid-" + id, TemplateID: tplID}); err != nil {
		t.Fatal(err)
	}
	var err error
	switch state {
	case backend.StatePaused:
	case backend.StateRunning:
		err = b.Resume(ctx, id)
	case backend.StateSaved:
		err = b.Save(ctx, id)
	case backend.StateStopped:
		err = b.Stop(ctx, id)
	case StateGone:
		err = b.Resume(ctx, id)
		b.Kill(id)
	case backend.StateIOError:
		err = b.Resume(ctx, id)
		b.StopOnWriteError(id)
	default:
		t.Fatalf("unknown state %q", state)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := state0(t, b, id); got != state {
		t.Fatalf("set up %s: state %s, want %s", id, got, state)
	}
}

func state0(t *testing.T, b *Backend, id string) string {
	t.Helper()
	info, err := b.Inspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

func TestStateMachine(t *testing.T) {
	const deleted = "deleted"
	ops := map[string]func(b *Backend, id string) error{
		OpPause:   func(b *Backend, id string) error { return b.Pause(context.Background(), id) },
		OpResume:  func(b *Backend, id string) error { return b.Resume(context.Background(), id) },
		OpSave:    func(b *Backend, id string) error { return b.Save(context.Background(), id) },
		OpRestore: func(b *Backend, id string) error { return b.Restore(context.Background(), id) },
		OpReset:   func(b *Backend, id string) error { return b.Reset(context.Background(), id) },
		OpStop:    func(b *Backend, id string) error { return b.Stop(context.Background(), id) },
		OpDelete:  func(b *Backend, id string) error { return b.Delete(context.Background(), id) },
	}
	const (
		run   = backend.StateRunning
		pause = backend.StatePaused
		saved = backend.StateSaved
		stop  = backend.StateStopped
		ioerr = backend.StateIOError
	)
	tests := []struct {
		from, op string
		want     string // the state after, or deleted
		wantErr  error  // the error category, state unchanged
	}{
		{run, OpPause, pause, nil},
		{run, OpResume, run, nil},
		{run, OpSave, saved, nil},
		{run, OpRestore, run, nil},
		{run, OpReset, pause, nil},
		{run, OpStop, stop, nil},
		{run, OpDelete, deleted, nil},

		{pause, OpPause, pause, nil},
		{pause, OpResume, run, nil},
		{pause, OpSave, saved, nil},
		{pause, OpRestore, pause, nil},
		{pause, OpReset, pause, nil},
		{pause, OpStop, stop, nil},
		{pause, OpDelete, deleted, nil},

		{saved, OpPause, "", api.ErrConflict},
		{saved, OpResume, run, nil},
		{saved, OpSave, saved, nil},
		{saved, OpRestore, pause, nil},
		{saved, OpReset, pause, nil},
		{saved, OpStop, stop, nil},
		{saved, OpDelete, deleted, nil},

		{stop, OpPause, "", api.ErrConflict},
		{stop, OpResume, "", api.ErrConflict},
		{stop, OpSave, "", api.ErrConflict},
		{stop, OpRestore, "", api.ErrConflict},
		{stop, OpReset, pause, nil},
		{stop, OpStop, stop, nil},
		{stop, OpDelete, deleted, nil},

		{StateGone, OpPause, "", api.ErrConflict},
		{StateGone, OpResume, "", api.ErrConflict},
		{StateGone, OpSave, "", api.ErrConflict},
		{StateGone, OpRestore, "", api.ErrConflict},
		{StateGone, OpReset, pause, nil},
		{StateGone, OpStop, stop, nil},
		{StateGone, OpDelete, deleted, nil},

		{ioerr, OpPause, pause, nil},
		{ioerr, OpResume, run, nil},
		{ioerr, OpSave, saved, nil},
		{ioerr, OpRestore, ioerr, nil},
		{ioerr, OpReset, pause, nil},
		{ioerr, OpStop, stop, nil},
		{ioerr, OpDelete, deleted, nil},
	}
	for _, tt := range tests {
		t.Run(tt.from+"/"+tt.op, func(t *testing.T) {
			b := newBackend(t, Options{})
			inState(t, b, "sb", tt.from)
			err := ops[tt.op](b, "sb")
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("%s from %s: err %v, want %v", tt.op, tt.from, err, tt.wantErr)
				}
				if got := state0(t, b, "sb"); got != tt.from {
					t.Fatalf("%s from %s failed but changed the state to %s", tt.op, tt.from, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s from %s: %v", tt.op, tt.from, err)
			}
			info, err := b.Inspect(context.Background(), "sb")
			if tt.want == deleted {
				if !errors.Is(err, api.ErrNotFound) {
					t.Fatalf("inspect after delete: %+v %v, want ErrNotFound", info, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if info.State != tt.want {
				t.Fatalf("%s from %s: state %s, want %s", tt.op, tt.from, info.State, tt.want)
			}
			hasProc := tt.want == run || tt.want == pause || tt.want == ioerr
			if (info.PID != 0) != hasProc {
				t.Fatalf("state %s with PID %d", info.State, info.PID)
			}
			ready, alive := b.Ready(context.Background(), "sb"), b.Alive(context.Background(), "sb")
			if tt.want == run && (ready != nil || alive != nil) {
				t.Fatalf("running: ready %v, alive %v", ready, alive)
			}
			if tt.want != run && (!errors.Is(ready, api.ErrConflict) || !errors.Is(alive, api.ErrConflict)) {
				t.Fatalf("%s: ready %v, alive %v, want ErrConflict", tt.want, ready, alive)
			}
		})
	}

	t.Run("missing", func(t *testing.T) {
		b := newBackend(t, Options{})
		for op, fn := range ops {
			err := fn(b, "nope")
			if op == OpDelete {
				if err != nil {
					t.Errorf("delete of a missing sandbox: %v", err)
				}
				continue
			}
			if !errors.Is(err, api.ErrNotFound) {
				t.Errorf("%s of a missing sandbox: %v, want ErrNotFound", op, err)
			}
		}
		ctx := context.Background()
		for name, err := range map[string]error{
			"ready": b.Ready(ctx, "nope"),
			"alive": b.Alive(ctx, "nope"),
			"input": func() error {
				return b.SendInput(ctx, "nope", []backend.InputEvent{{Kind: backend.EventMove, X: 1, Y: 1}})
			}(),
			"exec": func() error { _, err := b.Exec(ctx, "nope", backend.ExecRequest{Path: "true"}); return err }(),
			"logs": func() error { _, err := b.Logs(ctx, "nope"); return err }(),
		} {
			if !errors.Is(err, api.ErrNotFound) {
				t.Errorf("%s of a missing sandbox: %v, want ErrNotFound", name, err)
			}
		}
	})
}

func TestCreate(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	b := newBackend(t, Options{Now: func() time.Time { return now }})
	ctx := context.Background()
	info, err := b.Create(ctx, backend.SandboxSpec{ID: "a", UID: "u1", TemplateID: tplID})
	if err != nil {
		t.Fatal(err)
	}
	want := backend.Info{ID: "a", UID: "u1", TemplateID: tplID, State: backend.StatePaused, PID: info.PID,
		Display: "fake:a", Resolution: DefaultResolution, MemoryMB: DefaultTemplateMemoryMB, CreatedAt: now,
		Network: &backend.NetworkInfo{Mode: api.NetworkNAT, Address: fakeGuestAddress}}
	if !reflect.DeepEqual(info, want) || info.PID == 0 {
		t.Fatalf("create: %+v, want %+v", info, want)
	}
	if err := b.Resume(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	again, err := b.Create(ctx, backend.SandboxSpec{ID: "a", UID: "other", TemplateID: "other"})
	if err != nil || again.State != backend.StateRunning || again.UID != "u1" || again.PID != info.PID {
		t.Fatalf("create again: %+v %v, want the existing sandbox as it is", again, err)
	}
	other, err := b.Create(ctx, backend.SandboxSpec{ID: "b", TemplateID: tplID, Resolution: "1024x768"})
	if err != nil || other.Resolution != "1024x768" || other.PID <= info.PID {
		t.Fatalf("create b: %+v %v", other, err)
	}
	if w, h, err := b.ScreenSize(ctx, "b"); w != 1024 || h != 768 || err != nil {
		t.Fatalf("screen size %dx%d %v", w, h, err)
	}
	list, err := b.List(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "a" || list[1].ID != "b" {
		t.Fatalf("list: %+v %v", list, err)
	}

	tests := []struct {
		name string
		spec backend.SandboxSpec
		want error
	}{
		{"unknown template", backend.SandboxSpec{ID: "c", TemplateID: "nope"}, api.ErrNotFound},
		{"bad id", backend.SandboxSpec{ID: "Not_A_Label", TemplateID: tplID}, api.ErrInvalid},
		{"other memory", backend.SandboxSpec{ID: "c", TemplateID: tplID, MemoryMB: 1024}, api.ErrInvalid},
		{"bad resolution", backend.SandboxSpec{ID: "c", TemplateID: tplID, Resolution: "big"}, api.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := b.Create(ctx, tt.spec); !errors.Is(err, tt.want) {
				t.Fatalf("create %+v: %v, want %v", tt.spec, err, tt.want)
			}
			if _, err := b.Inspect(ctx, tt.spec.ID); !errors.Is(err, api.ErrNotFound) {
				t.Fatalf("a refused create left %s behind", tt.spec.ID)
			}
		})
	}
}

func TestTemplates(t *testing.T) {
	b := New(Options{Resolution: "1920x1080"})
	ctx := context.Background()
	var steps []string
	info, err := b.BuildTemplate(ctx, backend.TemplateSpec{ID: "t1", MemoryMB: 1024}, func(s string) { steps = append(steps, s) })
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != "t1" || info.MemoryBytes != 1024<<20 || info.Resolution != "1920x1080" || info.CreatedAt.IsZero() || len(steps) == 0 {
		t.Fatalf("build: %+v, steps %q", info, steps)
	}
	again, err := b.BuildTemplate(ctx, backend.TemplateSpec{ID: "t1", MemoryMB: 2048}, nil)
	if err != nil || again != info {
		t.Fatalf("build again: %+v %v, want %+v", again, err, info)
	}
	t2, err := b.BuildTemplate(ctx, backend.TemplateSpec{ID: "t2", Resolution: "800x600"}, nil)
	if err != nil || t2.MemoryBytes != 512<<20 || t2.Resolution != "800x600" {
		t.Fatalf("build t2: %+v %v", t2, err)
	}
	if got, err := b.InspectTemplate(ctx, "t1"); err != nil || got != info {
		t.Fatalf("inspect: %+v %v", got, err)
	}
	if _, err := b.InspectTemplate(ctx, "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("inspect unknown: %v", err)
	}
	if _, err := b.BuildTemplate(ctx, backend.TemplateSpec{ID: "t3", Resolution: "tiny"}, nil); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("bad resolution: %v", err)
	}
	if _, err := b.Create(ctx, backend.SandboxSpec{ID: "sb", TemplateID: "t1"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.DeleteTemplate(ctx, "t1"); err != nil {
			t.Fatalf("delete template: %v", err)
		}
	}
	if _, err := b.InspectTemplate(ctx, "t1"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("inspect deleted: %v", err)
	}
	if err := b.Resume(ctx, "sb"); err != nil {
		t.Fatalf("a clone of a deleted template: %v", err)
	}
	if _, err := b.Create(ctx, backend.SandboxSpec{ID: "sb2", TemplateID: "t1"}); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("create from a deleted template: %v", err)
	}
}

func TestCapacity(t *testing.T) {
	// 4096 MB at 50 %: two 1024 MB sandboxes fit, a third does not.
	b := New(Options{MemoryMB: 4096, LimitPercent: 50})
	ctx := context.Background()
	if _, err := b.BuildTemplate(ctx, backend.TemplateSpec{ID: tplID, MemoryMB: 1024}, nil); err != nil {
		t.Fatal(err)
	}
	create := func(id string) error {
		_, err := b.Create(ctx, backend.SandboxSpec{ID: id, TemplateID: tplID})
		return err
	}
	capacity := func(want backend.Capacity) {
		t.Helper()
		got, err := b.Capacity(ctx)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("capacity %+v %v, want %+v", got, err, want)
		}
	}
	tpl := func(fit int) []backend.TemplateCapacity {
		return []backend.TemplateCapacity{{ID: tplID, GuestMB: 1024, Fit: fit}}
	}
	capacity(backend.Capacity{TotalMemoryMB: 4096, AvailableMemoryMB: 4096, LimitMemoryMB: 2048, FreeMemoryMB: 2048, MemoryPressure: -1, Templates: tpl(2)})
	for _, id := range []string{"a", "b"} {
		if err := create(id); err != nil {
			t.Fatal(err)
		}
	}
	b.Resume(ctx, "a")
	capacity(backend.Capacity{TotalMemoryMB: 4096, AvailableMemoryMB: 2048, UsedMemoryMB: 2048, LimitMemoryMB: 2048, Running: 1, Paused: 1, MemoryPressure: -1, Templates: tpl(0)})
	if err := create("c"); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("create past the limit: %v", err)
	}
	if err := create("a"); err != nil {
		t.Fatalf("create of an existing sandbox at the limit: %v", err)
	}
	if err := b.Reset(ctx, "a"); err != nil {
		t.Fatalf("reset at the limit: %v", err)
	}
	// A saved sandbox has no process: its memory is free, until it comes
	// back.
	if err := b.Save(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := create("c"); err != nil {
		t.Fatalf("create after a save: %v", err)
	}
	// A sandbox that exists comes back past the limit, which is for new
	// ones, while the host has the room (capacity.Account.FitsExisting):
	// a claim of it must not fail.
	if err := b.Restore(ctx, "a"); err != nil {
		t.Fatalf("restore past the limit, the host having the room: %v", err)
	}
	if got := state0(t, b, "a"); got != backend.StatePaused {
		t.Fatalf("a restored sandbox is %s", got)
	}
	if err := create("d"); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("create past the limit: %v", err)
	}
	b.Kill("c")
	if err := b.Resume(ctx, "a"); err != nil {
		t.Fatalf("resume after a crash freed memory: %v", err)
	}
	if err := b.Stop(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	capacity(backend.Capacity{TotalMemoryMB: 4096, AvailableMemoryMB: 3072, UsedMemoryMB: 1024, LimitMemoryMB: 2048, FreeMemoryMB: 1024, Running: 1, MemoryPressure: -1, Templates: tpl(1)})
	if err := b.Reset(ctx, "b"); err != nil {
		t.Fatalf("reset of a stopped sandbox within the limit: %v", err)
	}
	if err := create("d"); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("create past the limit: %v", err)
	}
}

func TestFailNextAndCalls(t *testing.T) {
	b := newBackend(t, Options{})
	ctx := context.Background()
	inState(t, b, "a", backend.StatePaused)
	inState(t, b, "b", backend.StatePaused)
	b.ClearCalls()

	boom := errors.New("boom")
	b.FailNext(OpResume, "a", boom)
	if err := b.Resume(ctx, "b"); err != nil {
		t.Fatalf("resume of another id: %v", err)
	}
	if err := b.Resume(ctx, "a"); !errors.Is(err, boom) {
		t.Fatalf("resume a: %v, want boom", err)
	}
	if got := state0(t, b, "a"); got != backend.StatePaused {
		t.Fatalf("a failed resume changed the state to %s", got)
	}
	if err := b.Resume(ctx, "a"); err != nil {
		t.Fatalf("second resume: %v (FailNext fires once)", err)
	}

	b.FailNext(OpCreate, "", api.ErrUnavailable)
	b.FailNext(OpCreate, "", boom)
	if _, err := b.Create(ctx, backend.SandboxSpec{ID: "c", TemplateID: tplID}); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("first create: %v", err)
	}
	if _, err := b.Create(ctx, backend.SandboxSpec{ID: "d", TemplateID: tplID}); !errors.Is(err, boom) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := b.Create(ctx, backend.SandboxSpec{ID: "c", TemplateID: tplID}); err != nil {
		t.Fatalf("third create: %v", err)
	}

	b.FailNext(OpExec, "a", boom)
	if _, err := b.Exec(ctx, "a", backend.ExecRequest{Path: "true"}); !errors.Is(err, boom) {
		t.Fatalf("exec: %v", err)
	}

	want := []Call{{OpResume, "b"}, {OpResume, "a"}, {OpInspect, "a"}, {OpResume, "a"},
		{OpCreate, "c"}, {OpCreate, "d"}, {OpCreate, "c"}, {OpExec, "a"}}
	got := b.Calls()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("calls\n got %v\nwant %v", got, want)
	}
	for op, n := range map[string]int{OpResume: 3, OpCreate: 3, OpExec: 1, OpPause: 0} {
		if got := b.Count(op); got != n {
			t.Errorf("Count(%s) = %d, want %d", op, got, n)
		}
	}

	defer func() {
		if recover() == nil {
			t.Fatal("FailNext of an unknown op did not panic")
		}
	}()
	b.FailNext("resmue", "", boom)
}

func TestDelay(t *testing.T) {
	b := newBackend(t, Options{Delay: func(op string) time.Duration {
		if op == OpResume {
			return time.Hour
		}
		return 0
	}})
	inState(t, b, "a", backend.StatePaused)
	ctx, cancel := context.WithCancel(context.Background())
	go cancel()
	if err := b.Resume(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("resume with a cancelled context: %v", err)
	}
	if got := state0(t, b, "a"); got != backend.StatePaused {
		t.Fatalf("a cancelled resume changed the state to %s", got)
	}
}

func TestKill(t *testing.T) {
	b := newBackend(t, Options{})
	ctx := context.Background()
	inState(t, b, "a", backend.StateRunning)
	b.WriteFile("a", "/home/agent/f", []byte("x"))
	b.Kill("a")
	info, err := b.Inspect(ctx, "a")
	if err != nil || info.State != StateGone || info.PID != 0 {
		t.Fatalf("inspect after kill: %+v %v", info, err)
	}
	for name, err := range map[string]error{
		"ready":  b.Ready(ctx, "a"),
		"alive":  b.Alive(ctx, "a"),
		"resume": b.Resume(ctx, "a"),
	} {
		if !errors.Is(err, api.ErrConflict) {
			t.Errorf("%s after kill: %v, want ErrConflict", name, err)
		}
	}
	if _, ok := b.ReadFile("a", "/home/agent/f"); !ok {
		t.Error("a crash lost the disk")
	}
	b.Kill("a")    // nothing to kill
	b.Kill("nope") // nothing at all
	if err := b.Reset(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := b.Resume(ctx, "a"); err != nil {
		t.Fatalf("resume after reset: %v", err)
	}
	if _, ok := b.ReadFile("a", "/home/agent/f"); ok {
		t.Error("a file survived reset")
	}
}

func TestStopOnWriteError(t *testing.T) {
	b := newBackend(t, Options{})
	ctx := context.Background()
	inState(t, b, "a", backend.StateRunning)
	inState(t, b, "p", backend.StatePaused)
	b.SetDiskFull(true)
	b.StopOnWriteError("a")
	b.StopOnWriteError("p")    // paused: writes nothing
	b.StopOnWriteError("nope") // nothing at all
	before, _ := b.Inspect(ctx, "a")
	if before.State != backend.StateIOError || before.PID == 0 {
		t.Fatalf("after a failed write: %+v, want IOError with its process", before)
	}
	if got := state0(t, b, "p"); got != backend.StatePaused {
		t.Fatalf("a paused sandbox became %s", got)
	}
	if err := b.Resume(ctx, "a"); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("resume while the disk is full: %v, want ErrUnavailable", err)
	}
	if got := state0(t, b, "a"); got != backend.StateIOError {
		t.Fatalf("after a failed resume: %s, want IOError", got)
	}
	if _, err := b.Exec(ctx, "a", backend.ExecRequest{Path: "true"}); !errors.Is(err, api.ErrConflict) {
		t.Errorf("exec in a stopped guest: %v, want ErrConflict", err)
	}
	b.SetDiskFull(false)
	if err := b.Resume(ctx, "a"); err != nil {
		t.Fatalf("resume once there is room: %v", err)
	}
	after, _ := b.Inspect(ctx, "a")
	if after.State != backend.StateRunning || after.PID != before.PID {
		t.Fatalf("after the resume: %+v, want Running in the same process %d", after, before.PID)
	}
}

func TestExec(t *testing.T) {
	b := newBackend(t, Options{})
	ctx := context.Background()
	inState(t, b, "a", backend.StateRunning)
	b.WriteFile("a", "/etc/motd", []byte("hello\n"))
	tests := []struct {
		path       string
		args       []string
		stdin      string
		wantCode   int
		wantOut    string
		wantErrSub string
	}{
		{"true", nil, "", 0, "", ""},
		{"/bin/false", nil, "", 1, "", ""},
		{"echo", []string{"a", "b"}, "", 0, "a b\n", ""},
		{"hostname", nil, "", 0, "a\n", ""},
		{"cat", []string{"/etc/motd"}, "", 0, "hello\n", ""},
		{"cat", []string{"/etc/motd", "/nope", "/etc/motd"}, "", 1, "hello\nhello\n", "/nope: No such file"},
		{"cat", nil, "in", 0, "in", ""},
		{"tee", []string{"/tmp/t"}, "one\n", 0, "one\n", ""},
		{"cat", []string{"/tmp/t"}, "", 0, "one\n", ""},
		{"tee", []string{"-a", "/tmp/t"}, "two\n", 0, "two\n", ""},
		{"cat", []string{"/tmp/t"}, "", 0, "one\ntwo\n", ""},
		{"test", []string{"-e", "/tmp/t"}, "", 0, "", ""},
		{"test", []string{"-e", "/tmp"}, "", 0, "", ""},
		{"test", []string{"-d", "/tmp"}, "", 0, "", ""},
		{"test", []string{"-f", "/tmp"}, "", 1, "", ""},
		{"test", []string{"-e", "/tmp/nope"}, "", 1, "", ""},
		{"test", []string{"-x", "/tmp/t"}, "", 2, "", "supports only"},
		{"touch", []string{"/tmp/new"}, "", 0, "", ""},
		{"test", []string{"-f", "/tmp/new"}, "", 0, "", ""},
		{"rm", []string{"/tmp/new"}, "", 0, "", ""},
		{"rm", []string{"/tmp/new"}, "", 1, "", "No such file"},
		{"rm", []string{"-f", "/tmp/new"}, "", 0, "", ""},
		{"xdotool", []string{"getmouselocation"}, "", 127, "", "command not found"},
	}
	for _, tt := range tests {
		res, err := b.Exec(ctx, "a", backend.ExecRequest{Path: tt.path, Args: tt.args, Stdin: []byte(tt.stdin)})
		if err != nil {
			t.Fatalf("%s %q: %v", tt.path, tt.args, err)
		}
		if res.ExitCode != tt.wantCode || string(res.Stdout) != tt.wantOut || !strings.Contains(string(res.Stderr), tt.wantErrSub) {
			t.Errorf("%s %q: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q",
				tt.path, tt.args, res.ExitCode, res.Stdout, res.Stderr, tt.wantCode, tt.wantOut, tt.wantErrSub)
		}
	}

	res, err := b.Exec(ctx, "a", backend.ExecRequest{Path: "false", Detach: true})
	if err != nil || res.ExitCode != 0 || res.Stdout != nil {
		t.Fatalf("detached exec: %+v %v, want a zero result", res, err)
	}
	execs := b.Execs("a")
	if last := execs[len(execs)-1]; len(execs) != len(tests)+1 || last.Path != "false" || !last.Detach {
		t.Fatalf("execs recorded: %d, last %+v", len(execs), last)
	}
	if _, err := b.Exec(ctx, "a", backend.ExecRequest{Path: " "}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("exec with no command: %v", err)
	}
	b.Pause(ctx, "a")
	if _, err := b.Exec(ctx, "a", backend.ExecRequest{Path: "true"}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("exec in a paused sandbox: %v", err)
	}
}

func TestExecHook(t *testing.T) {
	var b *Backend
	b = newBackend(t, Options{Exec: func(id string, fs FS, req backend.ExecRequest) (backend.ExecResult, error) {
		fs.WriteFile("/ran", []byte(req.Path))
		// The hook runs without the lock: it may call the backend.
		if _, err := b.Inspect(context.Background(), id); err != nil {
			return backend.ExecResult{}, err
		}
		return backend.ExecResult{ExitCode: 7, Stdout: []byte(id)}, nil
	}})
	inState(t, b, "a", backend.StateRunning)
	res, err := b.Exec(context.Background(), "a", backend.ExecRequest{Path: "anything"})
	if err != nil || res.ExitCode != 7 || string(res.Stdout) != "a" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if got, ok := b.ReadFile("a", "/ran"); !ok || string(got) != "anything" {
		t.Fatalf("the hook's write: %q %v", got, ok)
	}
}

func TestFilesAndClipboard(t *testing.T) {
	b := newBackend(t, Options{})
	ctx := context.Background()
	inState(t, b, "a", backend.StateRunning)
	if err := b.CopyIn(ctx, "a", "/tmp/x", strings.NewReader("data")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := b.CopyOut(ctx, "a", "/tmp/x", &out); err != nil || out.String() != "data" {
		t.Fatalf("copy out: %q %v", out.String(), err)
	}
	if err := b.CopyOut(ctx, "a", "/tmp/missing", io.Discard); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("copy out of a missing file: %v", err)
	}
	if err := b.CopyIn(ctx, "a", "relative", strings.NewReader("")); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("copy in to a relative path: %v", err)
	}
	if err := b.ClipboardSet(ctx, "a", "clip ✓"); err != nil {
		t.Fatal(err)
	}
	if got, err := b.ClipboardGet(ctx, "a"); err != nil || got != "clip ✓" {
		t.Fatalf("clipboard: %q %v", got, err)
	}
	// Save and restore keep files and clipboard.
	b.Save(ctx, "a")
	if err := b.CopyOut(ctx, "a", "/tmp/x", io.Discard); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("copy out of a saved sandbox: %v", err)
	}
	b.Resume(ctx, "a")
	if got, _ := b.ClipboardGet(ctx, "a"); got != "clip ✓" {
		t.Fatalf("clipboard after save and resume: %q", got)
	}
	if got, ok := b.ReadFile("a", "/tmp/x"); !ok || string(got) != "data" {
		t.Fatalf("file after save and resume: %q %v", got, ok)
	}
	b.Reset(ctx, "a")
	b.Resume(ctx, "a")
	if got, _ := b.ClipboardGet(ctx, "a"); got != "" {
		t.Fatalf("clipboard after reset: %q", got)
	}
	if _, ok := b.ReadFile("a", "/tmp/x"); ok {
		t.Fatal("file after reset")
	}
	b.WriteFile("nope", "/x", nil) // a missing sandbox: nothing happens
	if _, ok := b.ReadFile("nope", "/x"); ok {
		t.Fatal("read from a missing sandbox")
	}
}

func TestInput(t *testing.T) {
	b := newBackend(t, Options{})
	ctx := context.Background()
	inState(t, b, "a", backend.StateRunning)

	bad := []struct {
		a     api.Action
		field string
	}{
		{api.Action{Action: "left_click", Coordinate: []int{1280, 10}}, "coordinate"},
		{api.Action{Action: "mouse_move", Coordinate: []int{-1, 10}}, "coordinate"},
		{api.Action{Action: "key", Text: "ctrl+nosuchkey"}, "text"},
		{api.Action{Action: "type", Text: ""}, "text"},
		{api.Action{Action: "scroll", Coordinate: []int{1, 1}, ScrollDirection: "sideways"}, "scroll_direction"},
		{api.Action{Action: "teleport"}, "action"},
		{api.Action{Action: "exec", Command: []string{"true"}}, "action"},
	}
	acts := display.NewActions(display.OnBackend(b))
	for _, tt := range bad {
		_, err := acts.Do(ctx, "a", tt.a, display.Space{})
		if !errors.Is(err, api.ErrInvalid) || api.FieldOf(err) != tt.field {
			t.Errorf("input %+v: %v (field %q), want ErrInvalid naming %s", tt.a, err, api.FieldOf(err), tt.field)
		}
	}
	if n := len(b.Events("a")); n != 0 {
		t.Fatalf("%d events of invalid actions recorded", n)
	}

	steps := []struct {
		a    api.Action
		x, y int // the pointer after
	}{
		{api.Action{Action: "cursor_position"}, 640, 400},
		{api.Action{Action: "left_click", Coordinate: []int{123, 77}}, 123, 77},
		{api.Action{Action: "type", Text: "hello "}, 123, 77},
		{api.Action{Action: "left_click_drag", StartCoordinate: []int{1, 1}, Coordinate: []int{1279, 799}}, 1279, 799},
		{api.Action{Action: "double_click"}, 1279, 799},
		{api.Action{Action: "key", Text: "ctrl+s"}, 1279, 799},
		{api.Action{Action: "type", Text: "world"}, 1279, 799},
		{api.Action{Action: "mouse_move", Coordinate: []int{0, 0}}, 0, 0},
		{api.Action{Action: "scroll", Coordinate: []int{10, 20}, ScrollDirection: "down", ScrollAmount: 3}, 10, 20},
		{api.Action{Action: "left_mouse_down"}, 10, 20},
	}
	for _, s := range steps {
		if _, err := acts.Do(ctx, "a", s.a, display.Space{}); err != nil {
			t.Fatalf("input %+v: %v", s.a, err)
		}
		pos, err := acts.Do(ctx, "a", api.Action{Action: "cursor_position"}, display.Space{})
		if err != nil || len(pos.Coordinate) != 2 || pos.Coordinate[0] != s.x || pos.Coordinate[1] != s.y {
			t.Fatalf("after %+v the pointer is at %+v (%v), want %d,%d", s.a, pos, err, s.x, s.y)
		}
	}
	if got := b.Typed("a"); got != "hello world" {
		t.Fatalf("typed %q", got)
	}
	evs := b.Events("a")
	if len(evs) < 3 || evs[0] != (backend.InputEvent{Kind: backend.EventMove, X: 123, Y: 77}) ||
		evs[1] != (backend.InputEvent{Kind: backend.EventButton, Button: backend.ButtonLeft, Down: true}) {
		t.Fatalf("events: %+v", evs)
	}

	b.Pause(ctx, "a")
	if _, err := acts.Do(ctx, "a", api.Action{Action: "mouse_move", Coordinate: []int{1, 1}}, display.Space{}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("input to a paused sandbox: %v", err)
	}
}

func TestScreenshot(t *testing.T) {
	b := newBackend(t, Options{})
	ctx := context.Background()
	inState(t, b, "a", backend.StateRunning)
	shot := func(opts backend.ScreenshotOptions) ([]byte, image.Image) {
		t.Helper()
		data, ctype, err := b.Screenshot(ctx, "a", opts)
		if err != nil {
			t.Fatal(err)
		}
		var img image.Image
		switch ctype {
		case "image/png":
			img, err = png.Decode(bytes.NewReader(data))
		case "image/jpeg":
			img, err = jpeg.Decode(bytes.NewReader(data))
		default:
			t.Fatalf("content type %q", ctype)
		}
		if err != nil {
			t.Fatalf("%s does not decode: %v", ctype, err)
		}
		return data, img
	}
	first, img := shot(backend.ScreenshotOptions{})
	if got := img.Bounds().Size(); got != image.Pt(1280, 800) {
		t.Fatalf("size %v", got)
	}
	if n := colours(img); n < 3 {
		t.Fatalf("looks blank: %d colours", n)
	}
	if again, _ := shot(backend.ScreenshotOptions{}); !bytes.Equal(again, first) {
		t.Fatal("the screen changed with no input")
	}
	if err := b.SendInput(ctx, "a", []backend.InputEvent{{Kind: backend.EventMove, X: 5, Y: 5}}); err != nil {
		t.Fatal(err)
	}
	if after, _ := shot(backend.ScreenshotOptions{}); bytes.Equal(after, first) {
		t.Fatal("the screen did not change after a click")
	}
	if _, img := shot(backend.ScreenshotOptions{Width: 640, Height: 400}); img.Bounds().Size() != image.Pt(640, 400) {
		t.Fatalf("scaled size %v", img.Bounds().Size())
	}
	data, ctype, err := b.Screenshot(ctx, "a", backend.ScreenshotOptions{Format: "jpeg", Quality: 50})
	if err != nil || ctype != "image/jpeg" {
		t.Fatalf("jpeg: %s %v", ctype, err)
	}
	if _, err := jpeg.Decode(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Screenshot(ctx, "a", backend.ScreenshotOptions{Format: "gif"}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("gif: %v", err)
	}
	b.Pause(ctx, "a")
	shot(backend.ScreenshotOptions{}) // paused is fine
	b.Save(ctx, "a")
	if _, _, err := b.Screenshot(ctx, "a", backend.ScreenshotOptions{}); !errors.Is(err, api.ErrConflict) {
		t.Fatalf("screenshot of a saved sandbox: %v", err)
	}
	if w, h, err := b.ScreenSize(ctx, "a"); w != 1280 || h != 800 || err != nil {
		t.Fatalf("screen size: %dx%d %v", w, h, err)
	}
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

func TestLogs(t *testing.T) {
	b := newBackend(t, Options{})
	ctx := context.Background()
	inState(t, b, "a", backend.StateRunning)
	b.Pause(ctx, "a")
	b.Pause(ctx, "a") // does nothing, logs nothing
	b.Save(ctx, "a")
	r, err := b.Logs(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data, _ := io.ReadAll(r)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	want := []string{"create: from template tpl -> Paused", "resume: Paused -> Running", "pause: Running -> Paused", "save: Paused -> Saved"}
	if len(lines) != len(want) {
		t.Fatalf("log:\n%s", data)
	}
	for i, l := range lines {
		if !strings.HasSuffix(l, want[i]) {
			t.Errorf("line %d: %q, want it to end with %q", i, l, want[i])
		}
	}
}

func TestConcurrent(t *testing.T) {
	b := New(Options{MemoryMB: 1 << 20})
	ctx := context.Background()
	if _, err := b.BuildTemplate(ctx, backend.TemplateSpec{ID: tplID}, nil); err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 32, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				id := fmt.Sprintf("sb-%d-%d", w, r)
				step := func(name string, err error) bool {
					if err != nil {
						errs <- fmt.Errorf("%s %s: %w", name, id, err)
						return false
					}
					return true
				}
				_, err := b.Create(ctx, backend.SandboxSpec{ID: id, TemplateID: tplID})
				ok := step("create", err) &&
					step("resume", b.Resume(ctx, id)) &&
					step("input", func() error {
						return b.SendInput(ctx, id, []backend.InputEvent{{Kind: backend.EventKey, Key: "x", Down: true}, {Kind: backend.EventKey, Key: "x"}})
					}()) &&
					step("exec", func() error {
						_, err := b.Exec(ctx, id, backend.ExecRequest{Path: "tee", Args: []string{"/f"}, Stdin: []byte(id)})
						return err
					}()) &&
					step("pause", b.Pause(ctx, id)) &&
					step("save", b.Save(ctx, id)) &&
					step("resume", b.Resume(ctx, id)) &&
					step("list", func() error { _, err := b.List(ctx); return err }()) &&
					step("capacity", func() error { _, err := b.Capacity(ctx); return err }()) &&
					step("delete", b.Delete(ctx, id))
				if !ok {
					return
				}
			}
		}()
	}
	// Screenshots, kills and call logs from the side, on ids that come and
	// go.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range workers * rounds {
			id := fmt.Sprintf("sb-%d-%d", i%workers, i/workers)
			b.Screenshot(ctx, id, backend.ScreenshotOptions{Width: 320, Height: 200})
			b.Calls()
			b.Typed(id)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if list, _ := b.List(ctx); len(list) != 0 {
		t.Fatalf("%d sandboxes left", len(list))
	}
	if got, want := b.Count(OpCreate), workers*rounds; got != want {
		t.Fatalf("Count(create) = %d, want %d", got, want)
	}
}

// memReader is a capacity.Reader whose host and footprints a test sets.
type memReader struct {
	mu   sync.Mutex
	host capacity.Host
	foot map[int]int // pid -> MiB; missing: defaultMB
	def  int
}

func (r *memReader) Host() (capacity.Host, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.host, nil
}

func (r *memReader) FootprintMB(pid int) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if mb, ok := r.foot[pid]; ok {
		return mb, nil
	}
	return r.def, nil
}

// TestCapacityMeasured: with a memory reader, clones count what they are
// measured to use, not their guest memory, and a running one keeps room
// to grow to its template's working set.
func TestCapacityMeasured(t *testing.T) {
	r := &memReader{host: capacity.Host{TotalMB: 10000, AvailableMB: 10000}, def: 60}
	b := New(Options{Memory: r})
	ctx := context.Background()
	if _, err := b.BuildTemplate(ctx, backend.TemplateSpec{ID: tplID, MemoryMB: 512}, nil); err != nil {
		t.Fatal(err)
	}
	// 8000 MiB may be used: at 512 MiB each 15 would fit; at 60, 133.
	n := 0
	for ; n < 200; n++ {
		if _, err := b.Create(ctx, backend.SandboxSpec{ID: fmt.Sprintf("sb-%d", n), TemplateID: tplID}); err != nil {
			if !errors.Is(err, api.ErrUnavailable) {
				t.Fatal(err)
			}
			break
		}
		r.mu.Lock()
		r.host.AvailableMB -= 60
		r.mu.Unlock()
	}
	if n != 133 {
		t.Fatalf("%d clones of 60 MiB fit under 8000 MiB, want 133", n)
	}
	c, err := b.Capacity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.UsedMemoryMB != 133*60 || c.Paused != 133 || c.Templates[0].CloneMB != 60 || c.Templates[0].Fit != 0 {
		t.Fatalf("capacity %+v", c)
	}
	// A running desktop reserves its growth: delete two, run one whose
	// template's working set is 200 MiB.
	for _, id := range []string{"sb-0", "sb-1"} {
		if err := b.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Lock()
	r.host.AvailableMB += 120
	r.mu.Unlock()
	b.book.ObserveRunning(tplID, 200)
	if err := b.Resume(ctx, "sb-2"); err != nil {
		t.Fatal(err)
	}
	c, _ = b.Capacity(ctx)
	if c.ReservedMemoryMB != 140 || c.FreeMemoryMB != 8000-131*60-140 || c.Running != 1 {
		t.Fatalf("with one running: %+v", c)
	}
	// Others' use of the host counts too: the host has little available.
	r.mu.Lock()
	r.host.AvailableMB = 2000 + 50
	r.mu.Unlock()
	if _, err := b.Create(ctx, backend.SandboxSpec{ID: "late", TemplateID: tplID}); !errors.Is(err, api.ErrUnavailable) || !strings.Contains(err.Error(), "not enough host memory") {
		t.Fatalf("create with the host short of memory: %v", err)
	}
}
