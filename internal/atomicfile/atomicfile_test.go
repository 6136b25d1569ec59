package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// entries lists dir's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vm.json")
	for i, want := range []string{`{"id":"a"}`, `{"id":"a","pid":42}`, ""} {
		if err := WriteFile(path, []byte(want), 0o640); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Fatalf("write %d: read %q, %v; want %q", i, got, err, want)
		}
	}
	if runtime.GOOS != "windows" {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o640 {
			t.Errorf("mode %v, want 0640", got)
		}
	}
	if got := entries(t, dir); len(got) != 1 || got[0] != "vm.json" {
		t.Errorf("directory holds %v, want only vm.json", got)
	}
}

func TestWriteFileFails(t *testing.T) {
	dir := t.TempDir()
	// A directory (not empty) where the file should go: the rename fails.
	path := filepath.Join(dir, "vm.json")
	if err := os.MkdirAll(filepath.Join(path, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("{}"), 0o600); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("write over a directory: %v, want an error naming the path", err)
	}
	if got := entries(t, dir); len(got) != 1 || got[0] != "vm.json" {
		t.Errorf("directory holds %v after a failed write, want only what was there", got)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "vm.json"), []byte("{}"), 0o600); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}

func TestWriteFileSyncFailureChangesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vm.json")
	if err := WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	eio := errors.New("input/output error")
	defer func(f func(*os.File) error) { syncFile = f }(syncFile)
	syncFile = func(*os.File) error { return eio }
	if err := WriteFile(path, []byte("new"), 0o600); !errors.Is(err, eio) {
		t.Fatalf("write with a failing sync: %v, want %v", err, eio)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("after a failed write the file holds %q, want the old content", got)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Errorf("directory holds %v after a failed write, want only vm.json", got)
	}
}

// TestWriteFileSyncsBeforeAndAfterTheRename checks the order that makes a
// write survive a crash: the new file's data is on disk before it takes
// the name, and the directory (the rename) after.
func TestWriteFileSyncsBeforeAndAfterTheRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vm.json")
	if err := WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	var steps []string
	defer func(f func(*os.File) error, d func(string) error) { syncFile, syncDir = f, d }(syncFile, syncDir)
	syncFile = func(f *os.File) error {
		cur, _ := os.ReadFile(path)
		tmp, _ := os.ReadFile(f.Name())
		steps = append(steps, fmt.Sprintf("sync file: %s holds %q, the new file %q", filepath.Base(path), cur, tmp))
		return f.Sync()
	}
	syncDir = func(d string) error {
		cur, _ := os.ReadFile(path)
		steps = append(steps, fmt.Sprintf("sync dir %v: %s holds %q", filepath.Clean(d) == dir, filepath.Base(path), cur))
		return syncDirectory(d)
	}
	if err := WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`sync file: vm.json holds "old", the new file "new"`,
		`sync dir true: vm.json holds "new"`,
	}
	if fmt.Sprint(steps) != fmt.Sprint(want) {
		t.Fatalf("steps:\n%s\nwant:\n%s", strings.Join(steps, "\n"), strings.Join(want, "\n"))
	}
}

// TestReadersSeeWholeFiles writes one file from several goroutines while
// another reads it: every read finds one writer's whole content, never an
// empty or mixed file.
func TestReadersSeeWholeFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vm.json")
	contents := map[string]bool{}
	for w := 0; w < 4; w++ {
		contents[strings.Repeat(string(rune('a'+w)), 64<<10)] = true
	}
	if err := WriteFile(path, []byte(strings.Repeat("a", 64<<10)), 0o600); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for c := range contents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if err := WriteFile(path, []byte(c), 0o600); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(stop) }()
	reads := 0
	for {
		select {
		case <-stop:
			if reads == 0 {
				t.Fatal("no read was made")
			}
			if got := entries(t, dir); len(got) != 1 {
				t.Errorf("directory holds %v, want only vm.json", got)
			}
			return
		default:
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !contents[string(b)] {
			t.Fatalf("read %d bytes that no writer wrote whole (starting %q)", len(b), bytes.TrimSpace(b[:min(len(b), 8)]))
		}
		reads++
	}
}
