package qemu

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestBootWatch drives a boot watch with a made clock and CPU counter: a
// stage fails on the CPU time it used, not on the clock, unless the clock
// passes bootWallFactor times the budget; a new stage has a budget of its
// own; a long stage reports how it goes.
func TestBootWatch(t *testing.T) {
	budget := 5 * time.Minute
	type tick struct {
		wall, cpu time.Duration // since the watch began
		begin     string        // begin this stage at the last tick's time, first
	}
	for _, tc := range []struct {
		name    string
		ticks   []tick
		wantErr string // "" for none at the last tick
		reports int
	}{
		{"fast", []tick{{wall: time.Minute, cpu: 50 * time.Second}}, "", 1},
		{"busy host: long on the clock, little CPU", []tick{{wall: 20 * time.Minute, cpu: 4 * time.Minute}}, "", 1},
		{"over its CPU budget", []tick{{wall: 6 * time.Minute, cpu: 5 * time.Minute}}, "the guest had 5m0s of CPU time", 0},
		{"a new stage has a budget of its own", []tick{
			{wall: 4 * time.Minute, cpu: 4 * time.Minute},
			{wall: 8 * time.Minute, cpu: 8 * time.Minute, begin: "the desktop to be ready"},
		}, "", 2},
		{"the second stage over its budget", []tick{
			{wall: 4 * time.Minute, cpu: 4 * time.Minute},
			{wall: 10 * time.Minute, cpu: 9*time.Minute + time.Second, begin: "the desktop to be ready"},
		}, "for the desktop to be ready", 1},
		{"the clock's bound", []tick{{wall: 31 * time.Minute, cpu: time.Minute}}, "the host is too busy", 0},
		{"no CPU time: the clock at the budget", []tick{{wall: 5 * time.Minute, cpu: -1}}, "waited 5m0s for the guest agent", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1e9, 0)
			var wall, cpu time.Duration
			var reports []string
			w := &bootWatch{pid: 1, budget: budget, wall: bootWallFactor * budget, now: func() time.Time { return t0.Add(wall) },
				cpu: func(int) (time.Duration, error) {
					if cpu < 0 {
						return 0, errors.New("no /proc")
					}
					return cpu, nil
				},
				progress: func(s string) { reports = append(reports, s) }}
			w.begin("the guest agent")
			var err error
			for _, tk := range tc.ticks {
				if tk.begin != "" {
					w.begin(tk.begin)
				}
				wall, cpu = tk.wall, tk.cpu
				err = w.check()
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("check: %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("check: %v, want one saying %q", err, tc.wantErr)
			}
			if len(reports) != tc.reports {
				t.Errorf("reports %q, want %d", reports, tc.reports)
			}
			for _, r := range reports {
				if !strings.HasPrefix(r, "waiting for ") {
					t.Errorf("report %q does not say what the boot waits for", r)
				}
			}
		})
	}
}
