package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestDefault(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("LOCALAPPDATA decides on Windows")
	}
	home := t.TempDir()
	tests := []struct {
		name, dataDir, xdg, want string
	}{
		{"HVKUBE_DATA_DIR", "/srv/hv", "/xdg", "/srv/hv"},
		{"XDG_DATA_HOME", "", "/xdg", "/xdg/hvkube"},
		{"home", "", "", filepath.Join(home, ".local", "share", "hvkube")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HVKUBE_DATA_DIR", tt.dataDir)
			t.Setenv("XDG_DATA_HOME", tt.xdg)
			t.Setenv("HOME", home)
			if got := Default(); got != tt.want {
				t.Errorf("Default() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content, want, wantErr string
	}{
		{"trimmed", "  abc123\n", "abc123", ""},
		{"empty", "\n", "", "is empty"},
		{"missing", "", "", "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name)
			if tt.name != "missing" {
				if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ReadTokenFile(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestLock: a second lock of the same directory is refused, naming the
// holder, until the first lets go.
func TestLock(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no lock on Windows")
	}
	dir := t.TempDir()
	unlock, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(dir); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("a second lock: %v, want ErrInUse naming this process", err)
	}
	unlock()
	again, err := Lock(dir)
	if err != nil {
		t.Fatalf("a lock after the first let go: %v", err)
	}
	again()
}
