//go:build linux

package qemu

import (
	"bytes"
	"context"
	"fmt"
	stdimage "image"
	"image/jpeg"
	"image/png"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/display"
)

// TestKeptScreen drives a sandbox's kept screen on a real desktop: it
// shows what a screendump shows, follows typing and a resolution change,
// serves the other formats, falls back to screendump when its connection
// breaks, and goes with the VM's process.
func TestKeptScreen(t *testing.T) {
	imageDir := requireImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b, err := New(ctx, Config{Dir: t.TempDir(), ImageDir: imageDir, NoSpares: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tpl, err := b.BuildTemplate(ctx, backend.TemplateSpec{ID: "kept-test", Image: api.QEMUImage{Image: "linux-desktop"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const id = "kept-1"
	if _, err := b.Create(ctx, backend.SandboxSpec{ID: id, TemplateID: tpl.ID}); err != nil {
		t.Fatal(err)
	}
	defer b.Delete(context.Background(), id)
	if err := b.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := b.Ready(ctx, id); err != nil {
		t.Fatal(err)
	}
	w, h, err := api.ParseResolution(tpl.Resolution)
	if err != nil {
		t.Fatal(err)
	}

	kept := func(t *testing.T, opts backend.ScreenshotOptions) []byte {
		t.Helper()
		data, _, err := b.Screenshot(ctx, id, opts)
		if err != nil {
			t.Fatal(err)
		}
		if k := b.keptOf(t, id); k == nil {
			t.Fatal("the screenshot did not come from a kept screen")
		}
		return data
	}
	dump := func(t *testing.T) stdimage.Image {
		t.Helper()
		v, err := b.rlockRunning(id)
		if err != nil {
			t.Fatal(err)
		}
		defer v.mu.RUnlock()
		v.scr.Lock()
		defer v.scr.Unlock()
		data, _, err := b.screendumpLocked(ctx, v, backend.ScreenshotOptions{}, display.EncodeOptions{Format: display.PNG})
		if err != nil {
			t.Fatal(err)
		}
		return decodePNG(t, data)
	}
	// sameAsScreendump compares the kept screen with screendumps taken
	// before and after it, on a screen that stays still meanwhile. While
	// someone looks the copy may be one display refresh (30 ms) plus its
	// transfer behind the screen, so the kept screenshot comes a few
	// refreshes after the first screendump: a change made just before
	// that screendump has reached the copy by then.
	sameAsScreendump := func(t *testing.T) stdimage.Image {
		t.Helper()
		for try := 0; ; try++ {
			before := dump(t)
			time.Sleep(4 * nudgeEvery)
			got := decodePNG(t, kept(t, backend.ScreenshotOptions{}))
			after := dump(t)
			if diff := pixelDiff(before, after); diff != "" {
				if try == 10 {
					t.Fatalf("the screen never stood still: %s", diff)
				}
				time.Sleep(300 * time.Millisecond)
				continue
			}
			if diff := pixelDiff(got, before); diff != "" {
				t.Fatalf("kept screen and screendump differ: %s", diff)
			}
			return got
		}
	}
	// waitChange takes screenshots until one differs from old.
	waitChange := func(t *testing.T, old []byte, what string) []byte {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			cur := kept(t, backend.ScreenshotOptions{})
			if !bytes.Equal(cur, old) {
				return cur
			}
			if time.Now().After(deadline) {
				t.Fatalf("the kept screen did not change after %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	t.Run("SameAsScreendump", func(t *testing.T) {
		got := sameAsScreendump(t)
		if got.Bounds() != stdimage.Rect(0, 0, w, h) {
			t.Fatalf("kept screen is %v, want %dx%d", got.Bounds(), w, h)
		}
		if !bytes.Equal(kept(t, backend.ScreenshotOptions{}), kept(t, backend.ScreenshotOptions{})) {
			t.Error("two screenshots of a still screen differ")
		}
	})

	t.Run("OtherFormats", func(t *testing.T) {
		full := decodePNG(t, kept(t, backend.ScreenshotOptions{}))
		jp, err := jpeg.Decode(bytes.NewReader(kept(t, backend.ScreenshotOptions{Format: "jpeg", Quality: 80})))
		if err != nil {
			t.Fatalf("jpeg: %v", err)
		}
		if jp.Bounds() != full.Bounds() {
			t.Errorf("jpeg is %v, want %v", jp.Bounds(), full.Bounds())
		}
		small := decodePNG(t, kept(t, backend.ScreenshotOptions{Width: w / 2}))
		if small.Bounds() != stdimage.Rect(0, 0, w/2, h/2) {
			t.Errorf("scaled png is %v, want %dx%d", small.Bounds(), w/2, h/2)
		}
		if _, _, err := b.Screenshot(ctx, id, backend.ScreenshotOptions{Format: "gif"}); err == nil {
			t.Error("an unknown format was accepted")
		}
		// The zoom action crops the full-size PNG.
		region, err := display.NewActions(display.OnBackend(b)).Region(ctx, id, stdimage.Rect(10, 20, 110, 70))
		if err != nil {
			t.Fatal(err)
		}
		crop := decodePNG(t, region)
		if crop.Bounds() != stdimage.Rect(0, 0, 100, 50) {
			t.Fatalf("region is %v", crop.Bounds())
		}
		for y := 0; y < 50; y++ {
			for x := 0; x < 100; x++ {
				if crop.At(x, y) != full.At(10+x, 20+y) {
					t.Fatalf("region pixel (%d,%d) differs from the screen's", x, y)
				}
			}
		}
	})

	t.Run("FollowsTyping", func(t *testing.T) {
		// The terminal covers a third of the way in, as the conformance
		// suite's typing test has it.
		if err := b.SendInput(ctx, id, []backend.InputEvent{
			{Kind: backend.EventMove, X: w / 3, Y: h / 3},
			{Kind: backend.EventButton, Button: backend.ButtonLeft, Down: true},
			{Kind: backend.EventButton, Button: backend.ButtonLeft},
		}); err != nil {
			t.Fatal(err)
		}
		before := sameAsScreendump(t)
		old := kept(t, backend.ScreenshotOptions{})
		for _, key := range []string{"x", "y", "z"} {
			if err := b.SendInput(ctx, id, []backend.InputEvent{{Kind: backend.EventKey, Key: key, Down: true}, {Kind: backend.EventKey, Key: key}}); err != nil {
				t.Fatal(err)
			}
			old = waitChange(t, old, "typing "+key)
		}
		after := sameAsScreendump(t)
		if pixelDiff(before, after) == "" {
			t.Fatal("typing did not change the screen")
		}
		// ?settle=true sees the screen change and settle.
		if err := b.SendInput(ctx, id, []backend.InputEvent{{Kind: backend.EventKey, Key: "ret", Down: true}, {Kind: backend.EventKey, Key: "ret"}}); err != nil {
			t.Fatal(err)
		}
		settled, _, err := display.NewActions(display.OnBackend(b)).Screenshot(ctx, id, display.ShotOptions{Settle: true})
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(settled, old) {
			t.Error("the settled screenshot does not show the Return typed before it")
		}
	})

	t.Run("FollowsResolution", func(t *testing.T) {
		g, err := b.guestOf(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		old := kept(t, backend.ScreenshotOptions{})
		if err := g.os.SetResolution(ctx, g, "1024x768"); err != nil {
			t.Fatal(err)
		}
		defer g.os.SetResolution(ctx, g, tpl.Resolution)
		deadline := time.Now().Add(20 * time.Second)
		for {
			cur := waitChange(t, old, "xrandr")
			if decodePNG(t, cur).Bounds() == stdimage.Rect(0, 0, 1024, 768) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the kept screen did not take the new resolution")
			}
			old = cur
		}
		sameAsScreendump(t)
	})

	t.Run("FallsBackToScreendump", func(t *testing.T) {
		k := b.keptOf(t, id)
		k.conn.Close() // as if QEMU had dropped the connection
		<-k.done
		data, _, err := b.Screenshot(ctx, id, backend.ScreenshotOptions{})
		if err != nil {
			t.Fatal(err)
		}
		decodePNG(t, data)
		v, _ := b.rlockVM(id)
		next := v.kept.load()
		v.mu.RUnlock()
		if usable, retry := next.state(); usable || retry {
			t.Fatalf("after a broken connection: usable %v, retry %v; want screendumps for a while", usable, retry)
		}
		// After keptRetry, the next screenshot connects again.
		next.mu.Lock()
		next.failedAt = time.Now().Add(-keptRetry)
		next.mu.Unlock()
		kept(t, backend.ScreenshotOptions{})
		sameAsScreendump(t)
	})

	t.Run("ClosedWhenIdle", func(t *testing.T) {
		k := b.keptOf(t, id)
		k.mu.Lock()
		k.lastLook = time.Now().Add(-keptIdle)
		k.mu.Unlock()
		k.idleCheck()
		<-k.done
		if usable, retry := k.state(); usable || !retry {
			t.Fatalf("an idle kept screen: usable %v, retry %v", usable, retry)
		}
		kept(t, backend.ScreenshotOptions{})
		if b.keptOf(t, id) == k {
			t.Fatal("no new kept screen after the idle one closed")
		}
	})

	t.Run("GoesWithTheProcess", func(t *testing.T) {
		k := b.keptOf(t, id)
		if err := b.Stop(ctx, id); err != nil {
			t.Fatal(err)
		}
		select {
		case <-k.done:
		case <-time.After(10 * time.Second):
			t.Fatal("the kept screen outlived its VM's process")
		}
		v, _ := b.rlockVM(id)
		left := v.kept.load()
		v.mu.RUnlock()
		if left != nil {
			t.Fatal("a stopped sandbox still has a kept screen")
		}
	})
}

// keptOf returns the sandbox's kept screen if it is usable, else nil.
func (b *Backend) keptOf(t *testing.T, id string) *keptScreen {
	t.Helper()
	v, err := b.rlockVM(id)
	if err != nil {
		t.Fatal(err)
	}
	defer v.mu.RUnlock()
	k := v.kept.load()
	if usable, _ := k.state(); !usable {
		return nil
	}
	return k
}

func decodePNG(t *testing.T, data []byte) stdimage.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("decode png: %v", err)
	}
	return img
}

// pixelDiff describes the first difference between two images, "" if
// they are the same.
func pixelDiff(a, b stdimage.Image) string {
	if a.Bounds() != b.Bounds() {
		return "sizes " + a.Bounds().String() + " and " + b.Bounds().String()
	}
	r := a.Bounds()
	n, first := 0, stdimage.Point{}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			ar, ag, ab, _ := a.At(x, y).RGBA()
			br, bg, bb, _ := b.At(x, y).RGBA()
			if ar != br || ag != bg || ab != bb {
				if n == 0 {
					first = stdimage.Pt(x, y)
				}
				n++
			}
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d pixels, the first at %v", n, first)
}
