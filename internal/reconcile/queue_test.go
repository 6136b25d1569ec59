package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestQueueNeverRunsAKeyTwiceAtOnce(t *testing.T) {
	q := NewQueue("test", slog.Default())
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.Map
	var overlaps, runs atomic.Int32
	done := make(chan struct{})
	go func() {
		q.Run(ctx, 4, func(ctx context.Context, key string) (Result, error) {
			if _, busy := running.LoadOrStore(key, true); busy {
				overlaps.Add(1)
			}
			time.Sleep(2 * time.Millisecond)
			running.Delete(key)
			runs.Add(1)
			return Result{}, nil
		})
		close(done)
	}()
	for i := 0; i < 200; i++ {
		q.Add([]string{"a", "b", "c"}[i%3])
		time.Sleep(100 * time.Microsecond)
	}
	time.Sleep(100 * time.Millisecond)
	cancel()
	<-done
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping runs of one key", overlaps.Load())
	}
	if n := runs.Load(); n < 3 || n > 200 {
		t.Fatalf("%d runs", n)
	}
}

func TestQueueDedupsAndRetries(t *testing.T) {
	q := NewQueue("test", slog.Default())
	q.Add("k")
	q.Add("k")
	if q.Len() != 1 {
		t.Fatalf("len %d, want 1", q.Len())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	succeeded := make(chan struct{})
	go q.Run(ctx, 1, func(ctx context.Context, key string) (Result, error) {
		if calls.Add(1) < 3 {
			return Result{}, errors.New("not yet")
		}
		close(succeeded)
		return Result{}, nil
	})
	select {
	case <-succeeded:
	case <-time.After(5 * time.Second):
		t.Fatalf("no success after %d calls", calls.Load())
	}
}

func TestQueueRecoversPanics(t *testing.T) {
	q := NewQueue("test", slog.Default())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	ok := make(chan struct{})
	go q.Run(ctx, 1, func(ctx context.Context, key string) (Result, error) {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		close(ok)
		return Result{}, nil
	})
	q.Add("k")
	select {
	case <-ok:
	case <-time.After(5 * time.Second):
		t.Fatal("the key was not retried after a panic")
	}
}

func TestQueueAddAfterKeepsTheEarlierDeadline(t *testing.T) {
	for _, tt := range []struct {
		name          string
		first, second time.Duration
	}{
		{"earlier first", 20 * time.Millisecond, time.Hour},
		{"earlier second", time.Hour, 20 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := NewQueue("test", slog.Default())
			defer q.ShutDown()
			q.AddAfter("k", tt.first)
			q.AddAfter("k", tt.second)
			deadline := time.Now().Add(5 * time.Second)
			for q.Len() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the key did not come back at the earlier deadline")
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
