//go:build linux

package qemu

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
)

// requireBrowserImage skips when the browser-desktop image is not built,
// unless HVKUBE_REQUIRE_BROWSER_IMAGE is set (make test sets it, as it
// builds the image: there a missing image is a failure).
func requireBrowserImage(t testing.TB) string {
	t.Helper()
	dir := DefaultImageDir()
	if _, err := os.Stat(filepath.Join(dir, "browser-desktop", "current", "image.json")); err != nil {
		if os.Getenv("HVKUBE_REQUIRE_BROWSER_IMAGE") != "" {
			t.Fatalf("the browser-desktop image is not built (%v): run make image-browser", err)
		}
		t.Skipf("the browser-desktop image is not built: run make image-browser (%v)", err)
	}
	return dir
}

// TestBrowserDesktop builds a browser-desktop template (a cold boot that
// waits for Firefox's start page), clones it and resumes the clone: Firefox's
// window and its start page must be on the screen at once, with no program
// started in the clone.
func TestBrowserDesktop(t *testing.T) {
	imageDir := requireBrowserImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	b, err := New(ctx, Config{Dir: t.TempDir(), ImageDir: imageDir, NoSpares: true, BootTimeout: 8 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	defer deleteBrowserTest(b)

	start := time.Now()
	tpl, err := b.BuildTemplate(ctx, backend.TemplateSpec{ID: "browser-desktop-test", Image: api.QEMUImage{Image: "browser-desktop"}},
		func(msg string) { t.Logf("template: %s", msg) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("template built in %s (boot %s)", time.Since(start).Round(time.Second), tpl.BootTime.Round(time.Second))

	info, err := b.Create(ctx, backend.SandboxSpec{ID: "browser-1", TemplateID: tpl.ID})
	if err != nil {
		t.Fatal(err)
	}
	if info.MemoryMB < 1024 {
		t.Errorf("clone has %d MB: the image recommends more for Firefox", info.MemoryMB)
	}
	if err := b.Resume(ctx, info.ID); err != nil {
		t.Fatal(err)
	}

	// The first X client run in the clone finds Firefox's window showing the
	// start page: it was on the screen when the snapshot was taken. A cold
	// Firefox start takes far longer than this bound under emulation.
	xctx, xcancel := context.WithTimeout(ctx, 30*time.Second)
	defer xcancel()
	res, err := b.Exec(xctx, info.ID, backend.ExecRequest{Path: "/usr/bin/xdotool",
		Args: []string{"search", "--onlyvisible", "--class", "^firefox", "getwindowname", "%@"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "hvkube browser desktop") {
		t.Fatalf("no Firefox window with the start page after resume: exit %d, out %q, err %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	// One Firefox main process, the template's: nothing was started again.
	res, err = b.Exec(xctx, info.ID, backend.ExecRequest{Path: "/usr/bin/pgrep", Args: []string{"-c", "-x", "firefox-esr"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(res.Stdout)); got != "1" {
		t.Errorf("firefox-esr processes in the clone: %q, want 1", got)
	}

	// The screen shows the start page: its header's colour (#1f6f5c) covers
	// a band across the maximised window.
	img, typ, err := b.Screenshot(ctx, info.ID, backend.ScreenshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if typ != "image/png" {
		t.Fatalf("screenshot type %q", typ)
	}
	pic, err := png.Decode(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	bounds := pic.Bounds()
	header, colours := 0, map[uint32]bool{}
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, bl, _ := pic.At(x, y).RGBA()
			r, g, bl = r>>8, g>>8, bl>>8
			if len(colours) < 1000 {
				colours[r<<16|g<<8|bl] = true
			}
			if nearByte(r, 0x1f) && nearByte(g, 0x6f) && nearByte(bl, 0x5c) {
				header++
			}
		}
	}
	if len(colours) < 10 {
		t.Errorf("the screen is blank: %d colours", len(colours))
	}
	if want := bounds.Dx() * 40; header < want {
		t.Errorf("start page header: %d pixels of its colour, want at least %d (a %dx%d screen)", header, want, bounds.Dx(), bounds.Dy())
	}
}

func nearByte(v, want uint32) bool { return v+8 >= want && v <= want+8 }

// deleteBrowserTest deletes every sandbox and template of b.
func deleteBrowserTest(b *Backend) {
	ctx := context.Background()
	list, _ := b.List(ctx)
	for _, s := range list {
		b.Delete(ctx, s.ID)
	}
	b.DeleteTemplate(ctx, "browser-desktop-test")
}
