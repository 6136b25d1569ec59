package qemu

import (
	"testing"
	"time"
)

func TestSpareSetWant(t *testing.T) {
	now := time.Now()
	takes := func(n int, every time.Duration) []time.Time {
		var ts []time.Time
		for i := n; i > 0; i-- {
			ts = append(ts, now.Add(-time.Duration(i)*every))
		}
		return ts
	}
	tests := []struct {
		name     string
		takes    []time.Time
		makeTook time.Duration
		max      int
		want     int
	}{
		{"never taken", nil, 0, 4, 1},
		{"taken once a minute", takes(1, time.Minute), 400 * time.Millisecond, 4, 1},
		{"a take every 3 s, 0.4 s to make", takes(10, 3*time.Second), 400 * time.Millisecond, 4, 2},
		{"a take every 100 ms, 0.4 s to make", takes(30, 100*time.Millisecond), 400 * time.Millisecond, 4, 2},
		{"60 takes in 6 s, 4 s to make", takes(60, 100*time.Millisecond), 4 * time.Second, 4, 4},
		{"capped at 2", takes(60, 100*time.Millisecond), 4 * time.Second, 2, 2},
		{"takes older than the window forgotten", takes(10, 10*time.Second), 10 * time.Second, 4, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &spareSet{takes: tt.takes, makeTook: tt.makeTook}
			if got := s.want(now, tt.max); got != tt.want {
				t.Fatalf("want = %d, expected %d (%d takes kept)", got, tt.want, len(s.takes))
			}
		})
	}
}

func TestShedSpares(t *testing.T) {
	sp := func(pid int) *spare { return &spare{p: &proc{pid: pid}} }
	b := &Backend{spares: map[string]*spareSet{
		"mine":  {memMB: 512, ready: []*spare{sp(1), sp(2)}},
		"other": {memMB: 1024, ready: []*spare{sp(3)}},
	}}
	// The other template's spare was measured at 100 MiB; the rest were
	// not, and count at their expected size.
	b.foot.set(3, footprint{mb: 100})
	// 512 MiB needed with nothing free: the other template's spare goes
	// first, then the template's own extra one, never its last.
	drop, free := b.shedSparesLocked(0, 512, "mine")
	if len(drop) != 2 || free != 612 || len(b.spares["other"].ready) != 0 || len(b.spares["mine"].ready) != 1 {
		t.Fatalf("dropped %d, free %d, other keeps %d, mine keeps %d", len(drop), free, len(b.spares["other"].ready), len(b.spares["mine"].ready))
	}
	// Enough free: nothing goes.
	if drop, free := b.shedSparesLocked(600, 512, "mine"); len(drop) != 0 || free != 600 {
		t.Fatalf("dropped %d with room, free %d", len(drop), free)
	}
}

func TestSpareWorthWaiting(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name                string
		started             time.Duration // ago
		makeTook, startTook time.Duration
		want                bool
	}{
		{"nothing measured yet", 0, 0, 0, true},
		{"just started, slower than a QEMU", 0, 700 * time.Millisecond, 300 * time.Millisecond, false},
		{"nearly made", 500 * time.Millisecond, 700 * time.Millisecond, 300 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &spareSet{makeTook: tt.makeTook, startTook: tt.startTook}
			if got := s.worthWaiting(&spareSlot{started: now.Add(-tt.started)}, now); got != tt.want {
				t.Fatalf("worthWaiting = %v", got)
			}
		})
	}
}
