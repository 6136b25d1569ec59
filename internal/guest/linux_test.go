package guest

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// recordingRunner records the programs an OS runs and answers them from
// answer (by program path), for tests of what the OS asks of its guest.
type recordingRunner struct {
	mu     sync.Mutex
	reqs   []backend.ExecRequest
	files  map[string]string
	answer func(req backend.ExecRequest) backend.ExecResult
}

func (r *recordingRunner) Exec(_ context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	if r.answer != nil {
		return r.answer(req), nil
	}
	return backend.ExecResult{}, nil
}

// fileRunner is a recordingRunner that also writes files directly.
type fileRunner struct{ *recordingRunner }

func (r fileRunner) WriteFile(_ context.Context, path string, data []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.files == nil {
		r.files = map[string]string{}
	}
	r.files[path] = string(data)
	return nil
}

func TestLinuxIdentity(t *testing.T) {
	ctx := context.Background()
	l := NewLinux(nil)

	// With a FileWriter the files are written without a program.
	fr := fileRunner{&recordingRunner{}}
	if err := l.Identity(ctx, fr, "desk-1"); err != nil {
		t.Fatal(err)
	}
	if len(fr.reqs) != 0 {
		t.Fatalf("programs run: %+v", fr.reqs)
	}
	if fr.files["/proc/sys/kernel/hostname"] != "desk-1" || !strings.Contains(fr.files["/etc/hosts"], "127.0.1.1\tdesk-1\n") {
		t.Fatalf("files: %v", fr.files)
	}
	if id := fr.files["/etc/machine-id"]; len(strings.TrimSpace(id)) != 32 {
		t.Fatalf("machine-id %q", id)
	}
	if b := strings.TrimSpace(fr.files["/run/hvkube/boot_id"]); len(b) != 36 || b[14] != '4' {
		t.Fatalf("boot_id %q is not a version 4 UUID", b)
	}
	first := fr.files["/etc/machine-id"]
	if err := l.Identity(ctx, fr, "desk-1"); err != nil || fr.files["/etc/machine-id"] == first {
		t.Fatalf("a second identity kept the machine id (%v)", err)
	}
	// Rename changes the hostname alone.
	ids := fr.files["/etc/machine-id"] + fr.files["/run/hvkube/boot_id"]
	if err := l.Rename(ctx, fr, "desk-9"); err != nil {
		t.Fatal(err)
	}
	if fr.files["/proc/sys/kernel/hostname"] != "desk-9" || !strings.Contains(fr.files["/etc/hosts"], "127.0.1.1\tdesk-9\n") {
		t.Fatalf("after rename: %v", fr.files)
	}
	if fr.files["/etc/machine-id"]+fr.files["/run/hvkube/boot_id"] != ids {
		t.Fatal("rename changed the machine or boot id")
	}

	// Without one, tee writes each file from its standard input.
	rr := &recordingRunner{}
	if err := l.Identity(ctx, rr, "desk-2"); err != nil {
		t.Fatal(err)
	}
	if len(rr.reqs) != 4 {
		t.Fatalf("%d programs, want 4", len(rr.reqs))
	}
	for _, req := range rr.reqs {
		if req.Path != "tee" || len(req.Args) != 1 || len(req.Stdin) == 0 {
			t.Fatalf("request %+v", req)
		}
	}
}

func TestLinuxHelpers(t *testing.T) {
	ctx := context.Background()
	l := NewLinux(map[string]string{HelperReady: "/opt/ready"})
	rr := &recordingRunner{answer: func(req backend.ExecRequest) backend.ExecResult {
		switch req.Path {
		case "/opt/ready":
			return backend.ExecResult{ExitCode: 1, Stderr: []byte("no X yet\n")}
		case DefaultHelpers[HelperClipboardGet]:
			return backend.ExecResult{Stdout: []byte("copied ✓")}
		case "xdotool":
			return backend.ExecResult{Stdout: []byte("X=12\nY=34\nSCREEN=0\nWINDOW=5\n")}
		}
		return backend.ExecResult{}
	}}
	if err := l.Ready(ctx, rr); err == nil || !strings.Contains(err.Error(), "no X yet") {
		t.Fatalf("ready: %v, want the helper's error text", err)
	}
	if got, err := l.ClipboardGet(ctx, rr); err != nil || got != "copied ✓" {
		t.Fatalf("clipboard get: %q %v", got, err)
	}
	if err := l.ClipboardSet(ctx, rr, "$(no shell) 'x'"); err != nil {
		t.Fatal(err)
	}
	last := rr.reqs[len(rr.reqs)-1]
	if last.Path != DefaultHelpers[HelperClipboardSet] || string(last.Stdin) != "$(no shell) 'x'" || len(last.Args) != 0 {
		t.Fatalf("clipboard set ran %+v", last)
	}
	if x, y, err := l.Cursor(ctx, rr); err != nil || x != 12 || y != 34 {
		t.Fatalf("cursor: %d,%d %v", x, y, err)
	}
	if err := l.SetResolution(ctx, rr, "wide"); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("bad resolution: %v", err)
	}
	if err := l.SetClock(ctx, rr, time.Unix(1700000000, 5)); err != nil {
		t.Fatal(err)
	}
	last = rr.reqs[len(rr.reqs)-1]
	if !reflect.DeepEqual(last.Args, []string{"-u", "-s", "@1700000000.000000005"}) {
		t.Fatalf("date args %v", last.Args)
	}
	if _, err := (LinuxOS{}).helper(ctx, rr, "nothing", nil); !errors.Is(err, api.ErrUnsupported) {
		t.Fatalf("missing helper: %v", err)
	}
}

func TestKeymapAdditions(t *testing.T) {
	table := `There are 4 KeySyms per KeyCode; KeyCodes range from 8 to 255.

    KeyCode	Keysym (Keysym)	...
    Value  	Value   (Name) 	...

     38    	0x0061 (a)	0x0041 (A)
     39    	0x00e9 (eacute)	0x00c9 (Eacute)
     40    	
     41    	
`
	cases := []struct {
		text string
		want []string
		err  bool
	}{
		{"plain ascii", nil, false},
		{"é is mapped", nil, false},
		{"✓", []string{"-e", "keycode 40 = 0x1002713 0x1002713"}, false},
		{"✓✓ñ", []string{"-e", "keycode 40 = 0x1002713 0x1002713", "-e", "keycode 41 = 0xf1 0xf1"}, false},
		{"✓ñ€", nil, true},
	}
	for _, c := range cases {
		got, err := keymapAdditions(table, c.text)
		if (err != nil) != c.err {
			t.Errorf("%q: err %v", c.text, err)
			continue
		}
		if err != nil && api.FieldOf(err) != "text" {
			t.Errorf("%q: error names %q", c.text, api.FieldOf(err))
		}
		if !c.err && !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %q, want %q", c.text, got, c.want)
		}
	}
}

func TestFor(t *testing.T) {
	for _, c := range []struct{ name, want string }{{"", Linux}, {"linux", Linux}, {"windows", Windows}} {
		os, err := For(c.name, nil)
		if err != nil || os.Name() != c.want {
			t.Errorf("For(%q) = %v, %v", c.name, os, err)
		}
	}
	if _, err := For("plan9", nil); api.FieldOf(err) != "spec.guest.os" {
		t.Errorf("For(plan9): %v", err)
	}
}

func TestIsAbs(t *testing.T) {
	cases := []struct {
		os   OS
		path string
		want bool
	}{
		{NewLinux(nil), "/tmp/x", true},
		{NewLinux(nil), "tmp/x", false},
		{WindowsOS{}, `C:\Users\Public\x`, true},
		{WindowsOS{}, `\\server\share\x`, true},
		{WindowsOS{}, `Users\x`, false},
		{WindowsOS{}, `/tmp/x`, false},
		{WindowsOS{}, `C:x`, false},
	}
	for _, c := range cases {
		if got := c.os.IsAbs(c.path); got != c.want {
			t.Errorf("%s IsAbs(%q) = %v", c.os.Name(), c.path, got)
		}
	}
}
