package bench

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

func TestParseMeminfo(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       memInfo
		wantErr    bool
	}{
		{"proc", "MemTotal:       24683916 kB\nMemFree:        22345412 kB\nMemAvailable:   23407148 kB\nBuffers:          123 kB\n",
			memInfo{TotalKB: 24683916, AvailableKB: 23407148}, false},
		{"order and spacing", "MemAvailable: 10 kB\nMemTotal:\t40 kB", memInfo{TotalKB: 40, AvailableKB: 10}, false},
		{"no MemAvailable (old kernel)", "MemTotal: 40 kB\nMemFree: 10 kB\n", memInfo{}, true},
		{"empty", "", memInfo{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMeminfo(tc.text)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %t", err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if got, want := (memInfo{TotalKB: 40, AvailableKB: 10}).UsedKB(), int64(30); got != want {
		t.Errorf("UsedKB = %d, want %d", got, want)
	}
}

func TestParsePss(t *testing.T) {
	rollup := `55c1f6a3e000-7ffd4b5f9000 ---p 00000000 00:00 0                          [rollup]
Rss:              215628 kB
Pss:              140212 kB
Pss_Dirty:        120000 kB
Pss_Anon:         118004 kB
Shared_Clean:      95416 kB
`
	for _, tc := range []struct {
		name, text string
		want       int64
		wantErr    bool
	}{
		{"rollup", rollup, 140212, false},
		{"Pss_ lines are not Pss", "Pss_Anon: 5 kB\nPss_File: 6 kB\n", 0, true},
		{"no unit", "Pss: 7\n", 7, false},
		{"garbage", "Pss: many kB\n", 0, true},
		{"empty", "", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePss(tc.text)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %t", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       procStat
		wantErr    bool
	}{
		{"qemu", "4242 (qemu-system-x86) S 1 4242 4242 0 -1 4194560 51277 0 0 0 1234 567 0 0 20 0 5 0 99999 1000 2000",
			procStat{Comm: "qemu-system-x86", State: "S", CPUTicks: 1234 + 567}, false},
		{"ksmd", "52 (ksmd) S 2 0 0 0 -1 2097216 0 0 0 0 0 88 0 0 25 5 1 0 30 0 0",
			procStat{Comm: "ksmd", State: "S", CPUTicks: 88}, false},
		{"name with spaces and parentheses", "7 (a (b) c) Z 1 7 7 0 -1 0 0 0 0 0 10 20 0 0 20 0 1 0 5 0 0",
			procStat{Comm: "a (b) c", State: "Z", CPUTicks: 30}, false},
		{"too short", "7 (x) S 1 2 3", procStat{}, true},
		{"no name", "7 x S 1 2 3 4 5 6 7 8 9 10 11 12 13", procStat{}, true},
		{"not a number", "7 (x) S 1 7 7 0 -1 0 0 0 0 0 ten 20 0", procStat{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat(tc.line)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %t", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// secondsAt returns times at the given seconds after a fixed start.
func secondsAt(s ...float64) []time.Time {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	out := make([]time.Time, len(s))
	for i, x := range s {
		out[i] = t0.Add(time.Duration(x * float64(time.Second)))
	}
	return out
}

func TestRates(t *testing.T) {
	// Ten desktops a second apart, with a slow start and a slow end.
	slowEnds := secondsAt(0, 20, 21, 22, 23, 24, 25, 26, 27, 60)
	for _, tc := range []struct {
		name          string
		times         []time.Time
		overall, mid8 float64
	}{
		{"none", nil, 0, 0},
		{"one", secondsAt(5), 0, 0},
		{"two", secondsAt(0, 2), 0.5, 0.5},
		{"same instant", secondsAt(3, 3, 3), 0, 0},
		{"steady", secondsAt(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), 1, 1},
		// The middle 80 % of 10 leaves one off each end: 7 intervals in 7 s.
		{"slow start and end", slowEnds, 9.0 / 60, 1},
		// Of 5, 10 % is half a desktop: none is left off.
		{"five", secondsAt(0, 10, 11, 12, 30), 4.0 / 30, 4.0 / 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rate(tc.times); math.Abs(got-tc.overall) > 1e-9 {
				t.Errorf("rate = %v, want %v", got, tc.overall)
			}
			if got := middleRate(tc.times, 0.8); math.Abs(got-tc.mid8) > 1e-9 {
				t.Errorf("middleRate = %v, want %v", got, tc.mid8)
			}
		})
	}
}

func sandboxIn(name, phase, reason string, pid int) *api.Sandbox {
	sb := &api.Sandbox{}
	sb.Metadata.Name = name
	sb.Status.Phase, sb.Status.Reason, sb.Status.PID = phase, reason, pid
	return sb
}

func TestRefused(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	waiting := []*api.Sandbox{
		sandboxIn("a", api.SandboxPaused, "Started", 10),
		sandboxIn("b", api.SandboxPending, "InsufficientMemory", 0),
	}
	for _, tc := range []struct {
		name string
		sbs  []*api.Sandbox
		now  time.Time
		want bool
	}{
		{"waiting for memory, quiet for a minute", waiting, t0.Add(time.Minute), true},
		{"waiting for memory, one paused 59 s ago", waiting, t0.Add(59 * time.Second), false},
		{"quiet, but nothing waits for memory", []*api.Sandbox{
			sandboxIn("a", api.SandboxPaused, "Started", 10),
			sandboxIn("b", api.SandboxCreating, "Cloning", 0),
		}, t0.Add(time.Hour), false},
		{"pending for another reason", []*api.Sandbox{
			sandboxIn("b", api.SandboxPending, "TemplateNotReady", 0),
		}, t0.Add(time.Hour), false},
		{"memory is a reason only while Pending", []*api.Sandbox{
			sandboxIn("b", api.SandboxError, "InsufficientMemory", 0),
		}, t0.Add(time.Hour), false},
		{"no sandboxes", nil, t0.Add(time.Hour), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := refused(tc.sbs, t0, tc.now, time.Minute); got != tc.want {
				t.Errorf("refused = %t, want %t", got, tc.want)
			}
		})
	}
}

func TestCountPhases(t *testing.T) {
	got := countPhases([]*api.Sandbox{
		sandboxIn("a", api.SandboxPaused, "", 1),
		sandboxIn("b", api.SandboxPaused, "", 2),
		sandboxIn("c", api.SandboxPending, "InsufficientMemory", 0),
		sandboxIn("d", "", "", 0),
		sandboxIn("e", api.SandboxCreating, "Cloning", 0),
		sandboxIn("f", api.SandboxSaved, "MovedToDisk", 0),
		sandboxIn("g", api.SandboxError, "CreateFailed", 0),
		sandboxIn("h", api.SandboxTerminating, "", 0),
	})
	want := phaseCounts{Paused: 2, Saved: 1, Creating: 1, Pending: 2, WaitingMemory: 1, Error: 1, Other: 1}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestHeldAndLostProblems(t *testing.T) {
	alive := func(pid int) bool { return pid == 1 || pid == 2 }
	sbs := []*api.Sandbox{
		sandboxIn("a", api.SandboxPaused, "", 1),
		sandboxIn("b", api.SandboxPaused, "", 3), // its QEMU is gone
		sandboxIn("c", api.SandboxSaved, "MovedToDisk", 0),
		sandboxIn("d", api.SandboxError, "CreateFailed", 0),
		sandboxIn("e", api.SandboxRunning, "", 2),
		sandboxIn("f", api.SandboxPending, "InsufficientMemory", 0),
	}
	held := heldProblems([]string{"a", "b", "gone"}, sbs, alive)
	if got, want := strings.Join(held, "|"), "b (Paused) has no live process (pid 3)|gone is gone"; got != want {
		t.Errorf("heldProblems = %q, want %q", got, want)
	}
	failed, dead := lostProblems(sbs, alive)
	if len(failed) != 1 || !strings.HasPrefix(failed[0], "d is Error") {
		t.Errorf("failed = %q, want d only", failed)
	}
	if len(dead) != 1 || !strings.HasPrefix(dead[0], "b is Paused") {
		t.Errorf("dead = %q, want b only (a Saved or Pending sandbox has no process)", dead)
	}
}

func TestDensityKey(t *testing.T) {
	for _, tc := range []struct {
		image    string
		pressure int
		want     string
	}{
		{"", 0, "density"}, {"linux-desktop", 0, "density"}, {"browser-desktop", 0, "density-browser-desktop"},
		{"linux-desktop", 40, "density-pressure"}, {"browser-desktop", 8, "density-pressure-browser-desktop"},
	} {
		if got := (DensityOptions{Image: tc.image, Pressure: tc.pressure}).Key(); got != tc.want {
			t.Errorf("Key(%q, pressure %d) = %q, want %q", tc.image, tc.pressure, got, tc.want)
		}
	}
}
