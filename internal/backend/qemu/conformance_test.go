//go:build linux

package qemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/backend/backendtest"
)

// requireImage skips when the desktop image is not built, unless
// HVKUBE_REQUIRE_QEMU is set (make test sets it: there a missing image is a
// failure, not a skip).
func requireImage(t testing.TB) string {
	t.Helper()
	dir := DefaultImageDir()
	if _, err := os.Stat(filepath.Join(dir, "linux-desktop", "current", "image.json")); err != nil {
		if os.Getenv("HVKUBE_REQUIRE_QEMU") != "" {
			t.Fatalf("the linux-desktop image is not built (%v): run make image", err)
		}
		t.Skipf("the linux-desktop image is not built: run make image (%v)", err)
	}
	return dir
}

func newTestBackend(t *testing.T, dir string) backend.Backend {
	t.Helper()
	b, err := New(context.Background(), Config{Dir: dir, ImageDir: requireImage(t)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformance(t *testing.T) {
	requireImage(t)
	backendtest.Run(t, backendtest.Options{
		New:      newTestBackend,
		Template: backend.TemplateSpec{ID: "linux-desktop-test", Image: api.QEMUImage{Image: "linux-desktop"}},
		Kill: func(t *testing.T, b backend.Backend, id string) {
			info, err := b.Inspect(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			syscall.Kill(info.PID, syscall.SIGKILL)
			deadline := time.Now().Add(10 * time.Second)
			for processAlive(info.PID, "hvkube-sandbox:"+id+":") && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		},
		Leftovers: func(t *testing.T, b backend.Backend, id string) []string {
			q := b.(*Backend)
			var left []string
			for _, p := range []string{q.sbDir(id), q.runDirFor(q.sbDir(id))} {
				if _, err := os.Stat(p); err == nil {
					left = append(left, p)
				}
			}
			entries, _ := os.ReadDir("/proc")
			for _, e := range entries {
				var pid int
				if _, err := fmt.Sscan(e.Name(), &pid); err == nil && processAlive(pid, "hvkube-sandbox:"+id+":") {
					left = append(left, "process "+e.Name())
				}
			}
			return left
		},
	})
}
