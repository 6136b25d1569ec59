package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// testBuffer is the watch buffer of the stores these tests open: small,
// so that overflowing it is cheap.
const testBuffer = 64

func openBuffered(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), t.TempDir(), Options{WatchBuffer: testBuffer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// createPools creates n pools named prefix-0… in one transaction, with
// labels.
func createPools(t *testing.T, s *Store, prefix string, n int, labels map[string]string) {
	t.Helper()
	err := s.Tx(context.Background(), func(tx *Tx) error {
		for i := range n {
			p := pool(fmt.Sprintf("%s-%d", prefix, i), 1)
			p.Metadata.Labels = labels
			if _, err := tx.Create(p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// drain reads w until its channel closes and returns what it read.
func drain(t *testing.T, w Watcher) []WatchEvent {
	t.Helper()
	var got []WatchEvent
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				return got
			}
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("the watch did not end; read %d events", len(got))
		}
	}
}

// TestWatchOverflowInOneTransaction: a transaction with more changes than
// an unread watcher has room for drops that watcher, once, without a
// panic; its reader gets what was buffered before and the error, and a
// watcher that does not see the changes keeps running.
func TestWatchOverflowInOneTransaction(t *testing.T) {
	ctx := context.Background()
	s := openBuffered(t)
	_, slow, err := s.ListAndWatch(ctx, api.KindSandboxPool, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	_, other, err := s.ListAndWatch(ctx, api.KindSandboxPool, api.SelectorFromMap(map[string]string{"team": "ops"}))
	if err != nil {
		t.Fatal(err)
	}
	createPools(t, s, "before", 10, map[string]string{"team": "qa"})
	createPools(t, s, "big", testBuffer+50, map[string]string{"team": "qa"})

	got := drain(t, slow)
	if len(got) != 10 {
		t.Fatalf("the dropped watcher delivered %d events, want the 10 buffered before the transaction that did not fit", len(got))
	}
	if err := slow.Err(); !errors.Is(err, ErrWatchOverflow) {
		t.Fatalf("Err() = %v, want ErrWatchOverflow", err)
	}
	last := got[len(got)-1].Object.GetMeta().ResourceVersion
	if _, err := s.WatchFrom(ctx, api.KindSandboxPool, api.Selector{}, last); !errors.Is(err, api.ErrGone) {
		t.Fatalf("watch again after more changes than a buffer holds: got %v, want ErrGone", err)
	}

	createPools(t, s, "ops", 1, map[string]string{"team": "ops"})
	select {
	case ev, ok := <-other.Events():
		if !ok || ev.Object.GetMeta().Name != "ops-0" {
			t.Fatalf("the other watcher got %v, %v; want ops-0", ev.Object, ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other watcher got nothing")
	}
	if err := other.Err(); err != nil {
		t.Fatalf("the other watcher ended: %v", err)
	}
}

// TestDroppedWatcherResumes: a watcher is dropped at a transaction's
// boundary, never halfway through it, so watching again from the last
// event it delivered replays the whole transaction it missed.
func TestDroppedWatcherResumes(t *testing.T) {
	ctx := context.Background()
	s := openBuffered(t)
	_, w, err := s.ListAndWatch(ctx, api.KindSandboxPool, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	createPools(t, s, "fill", testBuffer-10, nil)
	createPools(t, s, "next", 20, nil)
	got := drain(t, w)
	if len(got) != testBuffer-10 || !errors.Is(w.Err(), ErrWatchOverflow) {
		t.Fatalf("got %d events and %v; want %d and ErrWatchOverflow", len(got), w.Err(), testBuffer-10)
	}
	last := got[len(got)-1].Object.GetMeta().ResourceVersion
	again, err := s.WatchFrom(ctx, api.KindSandboxPool, api.Selector{}, last)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		ev := <-again.Events()
		if want := fmt.Sprintf("next-%d", i); ev.Type != Added || ev.Object.GetMeta().Name != want {
			t.Fatalf("replayed %s %s, want ADDED %s", ev.Type, ev.Object.GetMeta().Name, want)
		}
	}
}

// TestEventWriterSurvivesSlowWatcher: the event writer publishes a batch
// of queued events to an audit-log watcher with no room left; the watcher
// is dropped and the writer (whose goroutine a panic would take the
// process down with) goes on writing.
func TestEventWriterSurvivesSlowWatcher(t *testing.T) {
	ctx := context.Background()
	s := openBuffered(t)
	_, w, err := s.ListAndWatch(ctx, api.KindEvent, api.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	p := pool("p", 1)
	err = s.Tx(ctx, func(tx *Tx) error {
		for range testBuffer - 1 {
			if err := tx.Emit(p, api.EventNormal, "Fill", "fill"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The writer waits for the write lock with the first record while the
	// rest queue up behind it: its next batch overflows the watcher with
	// events still to send.
	batches, _ := hookEvents(t)
	s.writeMu.Lock()
	s.events <- eventRecord{obj: p, typ: api.EventNormal, reason: "First", message: "first"}
	<-batches // the writer took it, and waits for the lock
	for range 100 {
		s.events <- eventRecord{obj: p, typ: api.EventNormal, reason: "Queued", message: "queued"}
	}
	s.writeMu.Unlock()
	s.flushEvents(ctx)
	// Whether the first record fitted depends on how the writer batched it.
	if got := drain(t, w); len(got) < testBuffer-1 || !errors.Is(w.Err(), ErrWatchOverflow) {
		t.Fatalf("got %d events and %v; want at least %d and ErrWatchOverflow", len(got), w.Err(), testBuffer-1)
	}
	evs, err := s.ListEvents(ctx, EventFilter{Kind: api.KindSandboxPool, Name: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if n, want := len(evs), testBuffer-1+101; n != want || evs[n-1].Reason != "Queued" {
		t.Fatalf("the log holds %d events, the last %q; want %d, the queued ones written", n, evs[n-1].Reason, want)
	}
}
