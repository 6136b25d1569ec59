package qemu

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestWriteJSONWhileRead writes one vm.json from several goroutines while
// another reads it, as adoption would: every read decodes to one writer's
// whole record, and no write fails.
func TestWriteJSONWhileRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vm.json")
	metaOf := func(i int) vmMeta {
		return vmMeta{ID: "box", Name: sandboxNamePrefix + "box:" + strings.Repeat("x", 4096), PID: 1000 + i, Hostname: "box"}
	}
	if err := writeJSON(path, metaOf(0)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := 1; w <= 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if err := writeJSON(path, metaOf(w)); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	for reads := 0; ; reads++ {
		select {
		case <-done:
			if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 1 {
				t.Errorf("files left: %v", left)
			}
			return
		default:
		}
		var got vmMeta
		if err := readJSON(path, &got); err != nil {
			t.Fatalf("read %d: %v", reads, err)
		}
		if got.PID < 1000 || got.PID > 1004 || got != metaOf(got.PID-1000) {
			t.Fatalf("read %d: a record no writer wrote: %+v", reads, got.PID)
		}
	}
}

func TestReadJSONDamaged(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"empty", "", "vm.json is empty"},
		{"blank", "\n", "vm.json is empty"},
		{"cut short", `{"id": "box", "templ`, "vm.json is damaged or cut short (20 bytes"},
		{"not JSON", "\x00\x00\x00", "vm.json is damaged or cut short"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "vm.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			var m vmMeta
			err := readJSON(path, &m)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("readJSON = %v, want an error containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), filepath.Dir(path)) {
				t.Errorf("the error names the directory: %v", err)
			}
		})
	}
}

// TestDamagedMetadata starts a backend over files that a crash under an
// older server could leave: an empty template.json and an empty vm.json.
// Neither panics; the template's error says what is wrong with it, and
// the sandbox directory that cannot be adopted is removed with a log line
// that says why.
func TestDamagedMetadata(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 is not installed")
	}
	dir := t.TempDir()
	for _, d := range []string{"templates/tpl", "sandboxes/box"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"templates/tpl/template.json", "sandboxes/box/vm.json"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	b, err := New(context.Background(), Config{Dir: dir, ImageDir: t.TempDir(), RunDir: t.TempDir(), Accel: "tcg", NoSpares: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mu.Lock()
	got := logs.String()
	mu.Unlock()
	if !strings.Contains(got, "vm.json is empty") {
		t.Errorf("log does not say the sandbox's vm.json is empty:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "sandboxes", "box")); !os.IsNotExist(err) {
		t.Errorf("the sandbox directory that cannot be adopted is still there: %v", err)
	}
	if _, err := b.InspectTemplate(context.Background(), "tpl"); err == nil || !strings.Contains(err.Error(), "template.json is empty") {
		t.Errorf("InspectTemplate = %v, want an error saying template.json is empty", err)
	}
	if _, err := b.List(context.Background()); err != nil {
		t.Errorf("List: %v", err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
