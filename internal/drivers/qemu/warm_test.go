//go:build linux

package qemu

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
	"github.com/hvkube/hvkube/internal/backend"
	"github.com/hvkube/hvkube/internal/capacity"
)

// TestWarmOnRequest: with Config.WarmOnRequest, clones started on demand
// stay as cloned (counted at their own, smaller, size) until ReadyAhead
// asks for one; the one asked for is readied (it grows, and leaves the
// list), the other is not, and both resume and answer.
func TestWarmOnRequest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	b, tpl := deskBackend(t, ctx, Config{NoSpares: true, WarmOnRequest: true}, "warm-base")
	var _ backend.Readier = b
	for _, id := range []string{"first", "second"} {
		if _, err := b.Create(ctx, backend.SandboxSpec{ID: id, TemplateID: tpl.ID}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Delete(context.Background(), id) })
	}
	if got := b.Unreadied(ctx); !slices.Equal(got, []string{"first", "second"}) {
		t.Fatalf("unreadied %v, want both clones in the order they were made", got)
	}
	if b.Readying() != 0 {
		t.Fatalf("%d clones readied unasked", b.Readying())
	}
	cold := b.book.Profile(tpl.ID).ColdMB
	if cold <= 0 || b.book.Profile(tpl.ID).Expect() != cold {
		t.Fatalf("profile %+v: want a measured cold size that new clones are expected at", b.book.Profile(tpl.ID))
	}

	if err := b.ReadyAhead(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	if err := b.ReadyAhead(ctx, "first"); err != nil {
		t.Fatal(err) // asked twice: queued once
	}
	if err := b.ReadyAhead(ctx, "no-such-sandbox"); err != nil {
		t.Fatalf("a missing sandbox: %v, want it left alone", err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for b.Readying() > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if got := b.Unreadied(ctx); !slices.Equal(got, []string{"second"}) {
		t.Fatalf("unreadied %v after readying the first, want [second]", got)
	}
	p := b.book.Profile(tpl.ID)
	t.Logf("a clone as cloned %d MiB, readied %d MiB", p.ColdMB, p.CloneMB)
	if p.CloneMB <= 0 {
		t.Errorf("profile %+v: the readied clone was not measured", p)
	}
	if p.Expect() != p.ColdMB {
		t.Errorf("a new clone is expected at %d MiB, want the cold size %d", p.Expect(), p.ColdMB)
	}
	for _, id := range []string{"first", "second"} {
		began := time.Now()
		if err := b.Resume(ctx, id); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s resumed in %s", id, time.Since(began).Round(time.Millisecond))
		if err := b.Alive(ctx, id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	if got := b.Unreadied(ctx); len(got) != 0 {
		t.Errorf("unreadied %v after both ran", got)
	}
}

// TestReadyAheadRefusedWithoutRoom: a readying whose growth does not fit
// under the limit is refused with ErrUnavailable, and the clone stays as
// cloned.
func TestReadyAheadRefusedWithoutRoom(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	mem := &tightHost{}
	b, tpl := deskBackend(t, ctx, Config{NoSpares: true, WarmOnRequest: true, Memory: mem}, "warm-tight")
	if _, err := b.Create(ctx, backend.SandboxSpec{ID: "tight", TemplateID: tpl.ID}); err != nil {
		t.Fatal(err)
	}
	defer b.Delete(context.Background(), "tight")
	b.book.ObserveClone(tpl.ID, 4096) // a readied clone would need far more than is left
	mem.tight.Store(true)
	if err := b.ReadyAhead(ctx, "tight"); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("ReadyAhead on a full host: %v, want ErrUnavailable", err)
	}
	if got := b.Unreadied(ctx); !slices.Equal(got, []string{"tight"}) || b.Readying() != 0 {
		t.Errorf("unreadied %v, readying %d: want the clone left as cloned", got, b.Readying())
	}
}

// tightHost is the host's real memory, except that, once tight, only
// 1 GiB of it is available.
type tightHost struct {
	capacity.ProcReader
	tight atomic.Bool
}

func (h *tightHost) Host() (capacity.Host, error) {
	m, err := h.ProcReader.Host()
	if err == nil && h.tight.Load() {
		m.AvailableMB = 1024
	}
	return m, err
}
