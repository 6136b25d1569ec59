package capacity

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestCount(t *testing.T) {
	host := Host{TotalMB: 24000, AvailableMB: 23000}
	book := NewBook()
	book.Set("desk", Profile{GuestMB: 512, CloneMB: 60, WorkingSetMB: 300})
	tests := []struct {
		name   string
		host   Host
		policy Policy
		ds     []Desktop
		want   Account
	}{
		{"empty host", host, Policy{}, nil,
			Account{TotalMB: 24000, AvailableMB: 23000, LimitMB: 19200, FreeMB: 19200}},
		{"paused clones count what they use", host, Policy{},
			[]Desktop{{Template: "desk", FootprintMB: 60}, {Template: "desk", FootprintMB: 58}},
			Account{TotalMB: 24000, AvailableMB: 23000, LimitMB: 19200, UsedMB: 118, FreeMB: 19082, Paused: 2}},
		{"a running desktop reserves its working set", Host{TotalMB: 24000, AvailableMB: 30000}, Policy{},
			[]Desktop{{Template: "desk", Running: true, FootprintMB: 100}},
			Account{TotalMB: 24000, AvailableMB: 30000, LimitMB: 19200, UsedMB: 100, ReservedMB: 200, FreeMB: 18900, Running: 1}},
		{"a fixed running reserve", Host{TotalMB: 24000, AvailableMB: 30000}, Policy{RunningReserveMB: 50},
			[]Desktop{{Template: "desk", Running: true, FootprintMB: 100}},
			Account{TotalMB: 24000, AvailableMB: 30000, LimitMB: 19200, UsedMB: 100, ReservedMB: 50, FreeMB: 19050, Running: 1}},
		{"one past its working set reserves nothing", Host{TotalMB: 24000, AvailableMB: 30000}, Policy{},
			[]Desktop{{Template: "desk", Running: true, FootprintMB: 400}},
			Account{TotalMB: 24000, AvailableMB: 30000, LimitMB: 19200, UsedMB: 400, FreeMB: 18800, Running: 1}},
		{"unmeasured counts at its expected size", Host{TotalMB: 24000, AvailableMB: 30000}, Policy{},
			[]Desktop{{Template: "desk", ExpectMB: 512}},
			Account{TotalMB: 24000, AvailableMB: 30000, LimitMB: 19200, ReservedMB: 512, FreeMB: 18688, Paused: 1}},
		{"others' use of the host counts: it keeps 15 % available", Host{TotalMB: 24000, AvailableMB: 6000}, Policy{},
			[]Desktop{{Template: "desk", FootprintMB: 60}},
			Account{TotalMB: 24000, AvailableMB: 6000, LimitMB: 19200, UsedMB: 60, FreeMB: 2400, Paused: 1}},
		{"a higher limit keeps less", Host{TotalMB: 24000, AvailableMB: 6000}, Policy{LimitPercent: 92},
			[]Desktop{{Template: "desk", FootprintMB: 60}},
			Account{TotalMB: 24000, AvailableMB: 6000, LimitMB: 22080, UsedMB: 60, FreeMB: 4080, Paused: 1}},
		{"a lower limit", host, Policy{LimitPercent: 50}, nil,
			Account{TotalMB: 24000, AvailableMB: 23000, LimitMB: 12000, FreeMB: 12000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Count(tt.host, tt.policy, book, tt.ds); got != tt.want {
				t.Errorf("Count = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestBusyReserve: paused desktops of a template keep room to run as
// many at once as ran lately (from a readied clone to the working set),
// less those running now, until the window forgets it.
func TestBusyReserve(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	book := NewBook()
	book.Now = func() time.Time { return now }
	book.Set("desk", Profile{GuestMB: 512, CloneMB: 60, WorkingSetMB: 300})
	host := Host{TotalMB: 24000, AvailableMB: 23000}
	book.ObserveBusy(map[string]int{"desk": 3})
	now = now.Add(time.Minute)
	book.ObserveBusy(nil)
	paused := []Desktop{{Template: "desk", FootprintMB: 60}, {Template: "desk", FootprintMB: 60}}
	if got := Count(host, Policy{}, book, paused).ReservedMB; got != 3*240 {
		t.Errorf("after 3 ran at once, none now: reserved %d, want %d", got, 3*240)
	}
	one := append(paused, Desktop{Template: "desk", Running: true, FootprintMB: 100})
	if got := Count(host, Policy{}, book, one).ReservedMB; got != 2*240+200 {
		t.Errorf("one running: reserved %d, want 2 x 240 + its own 200", got)
	}
	now = now.Add(BusyWindow)
	book.ObserveBusy(map[string]int{"desk": 1})
	if got := Count(host, Policy{}, book, paused).ReservedMB; got != 240 {
		t.Errorf("after the window: reserved %d, want 240 (one ran since)", got)
	}
	now = now.Add(BusyWindow + time.Second)
	book.ObserveBusy(nil)
	if got := Count(host, Policy{}, book, paused).ReservedMB; got != 0 || len(book.busy) != 0 {
		t.Errorf("a window with none running: reserved %d (%d templates tracked), want 0", got, len(book.busy))
	}
}

func TestPeak(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	p := Peak{Window: 10 * time.Minute}
	for _, tc := range []struct {
		at   time.Duration
		n    int
		want int
	}{
		{0, 2, 2}, {time.Minute, 5, 5}, {2 * time.Minute, 1, 5}, {3 * time.Minute, 3, 5},
		{11*time.Minute + time.Second, 0, 3}, {13*time.Minute + time.Second, 0, 0}, {30 * time.Minute, 0, 0},
	} {
		if got := p.Observe(tc.n, t0.Add(tc.at)); got != tc.want || p.Max() != tc.want {
			t.Errorf("at %s, %d: max %d (Max %d), want %d", tc.at, tc.n, got, p.Max(), tc.want)
		}
	}
}

func TestAccountFits(t *testing.T) {
	a := Account{FreeMB: 130}
	if !a.Fits(130) || a.Fits(131) {
		t.Errorf("Fits around 130 MiB free is wrong")
	}
	if got := a.More(60); got != 2 {
		t.Errorf("More(60) = %d, want 2", got)
	}
	if got := (Account{FreeMB: -5}).More(60); got != 0 {
		t.Errorf("More with nothing free = %d, want 0", got)
	}
	// A desktop that exists comes back past the limit while the host
	// keeps its floor (3 % of 10000 MiB) available.
	for _, tc := range []struct {
		available, mb int
		want          bool
	}{
		{2000, 60, true}, {360, 60, true}, {359, 60, false}, {100, 60, false},
	} {
		full := Account{TotalMB: 10000, AvailableMB: tc.available, FreeMB: -40}
		if got := full.FitsExisting(tc.mb); got != tc.want || full.Fits(tc.mb) {
			t.Errorf("%d MiB available, %d more: FitsExisting = %v, want %v (and Fits false)", tc.available, tc.mb, got, tc.want)
		}
	}
	msg := Account{FreeMB: -5, UsedMB: 100, LimitMB: 90}.Refusal("a clone of desk", 60)
	if !strings.Contains(msg, "0 MiB are free") || !strings.Contains(msg, "a clone of desk") {
		t.Errorf("Refusal = %q", msg)
	}
}

func TestBook(t *testing.T) {
	b := NewBook()
	if got := b.Profile("x").Expect(); got != 0 {
		t.Errorf("unknown template expects %d", got)
	}
	b.Set("x", Profile{GuestMB: 512})
	if got := b.Profile("x").Expect(); got != 512 {
		t.Errorf("unmeasured template expects %d, want its guest memory", got)
	}
	b.ObserveClone("x", 80)
	if got := b.Profile("x").Expect(); got != 80 {
		t.Errorf("after a clone of 80: %d", got)
	}
	b.ObserveClone("x", 40)
	if got := b.Profile("x").CloneMB; got != 75 {
		t.Errorf("a smaller clone pulls down by an eighth: %d, want 75", got)
	}
	b.ObserveClone("x", 90)
	if got := b.Profile("x").CloneMB; got != 90 {
		t.Errorf("a larger clone is taken at once: %d", got)
	}
	b.ObserveRunning("x", 300)
	b.ObserveRunning("x", 200)
	if got := b.Profile("x").WorkingSetMB; got != 300 {
		t.Errorf("working set = %d, want the largest seen", got)
	}
	b.Set("x", Profile{WorkingSetMB: 100})
	if got := b.Profile("x"); got.WorkingSetMB != 300 || got.CloneMB != 90 || got.GuestMB != 512 {
		t.Errorf("Set with a smaller working set changed the profile: %+v", got)
	}
	// Where clones stay as cloned until readied, a new one is expected
	// at its cold size; a readied one still at CloneMB.
	b.ObserveCold("x", 28)
	b.ObserveCold("x", 20)
	if got := b.Profile("x"); got.Expect() != 27 || got.Readied() != 90 || got.ColdMB != 27 {
		t.Errorf("after cold clones of 28 and 20: expect %d, readied %d (%+v), want 27 and 90", got.Expect(), got.Readied(), got)
	}
}

func TestParse(t *testing.T) {
	h, err := ParseMeminfo([]byte("MemTotal:       24684236 kB\nMemFree:        22663424 kB\nMemAvailable:   23461224 kB\n"))
	if err != nil || h.TotalMB != 24105 || h.AvailableMB != 22911 {
		t.Errorf("ParseMeminfo = %+v, %v", h, err)
	}
	if _, err := ParseMeminfo([]byte("MemTotal: 1 kB\n")); err == nil {
		t.Error("meminfo without MemAvailable parsed")
	}
	v, ok := ParsePressure([]byte("some avg10=1.50 avg60=0.00 avg300=0.00 total=12\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	if !ok || v != 1.5 {
		t.Errorf("ParsePressure = %v, %v", v, ok)
	}
	if _, ok := ParsePressure([]byte("garbage")); ok {
		t.Error("garbage parsed as pressure")
	}
}

func TestProcReaderOwnProcess(t *testing.T) {
	r := ProcReader{}
	h, err := r.Host()
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if h.TotalMB <= 0 || h.AvailableMB <= 0 || h.AvailableMB > h.TotalMB {
		t.Errorf("Host = %+v", h)
	}
	mb, err := r.FootprintMB(os.Getpid())
	if err != nil {
		t.Skipf("own smaps_rollup: %v", err)
	}
	if mb <= 0 {
		t.Errorf("this process uses %d MiB", mb)
	}
}
