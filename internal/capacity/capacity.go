// Package capacity counts a host's memory the way hvkube admits desktops:
// by what their VMs use, measured, not by the guest memory they were
// promised. A paused clone of a template shares the template's memory
// file copy-on-write and uses a small part of its guest RAM; a running
// desktop grows towards its working set. The arithmetic here is the same
// for every backend; a Reader supplies the measurements.
package capacity

import (
	"fmt"
	"sync"
	"time"
)

// Host is the host's memory, in MiB.
type Host struct {
	TotalMB     int
	AvailableMB int // MemAvailable: free memory plus what the kernel can reclaim
	// PressureAvg10 is the share of the last 10 s in which some task
	// waited for memory (PSI, percent); negative when the kernel does not
	// report it.
	PressureAvg10 float64
}

// Reader measures the host and the processes of its VMs.
type Reader interface {
	Host() (Host, error)
	// FootprintMB is what a process uses: its private pages plus its
	// share of the pages it shares with others (the proportional set
	// size), in MiB.
	FootprintMB(pid int) (int, error)
}

// Defaults of Policy.
const (
	DefaultLimitPercent    = 80
	DefaultPressurePercent = 10
	// MaxKeepPercent is the most of host memory kept available beside
	// the limit (see Count): the pressure threshold and room above it.
	MaxKeepPercent = 15
)

// Policy is how much of the host desktops may use.
type Policy struct {
	// LimitPercent of host memory is the most the desktops may use,
	// reserves included (default DefaultLimitPercent). The rest is kept
	// for the host, and whatever else uses memory beside the desktops
	// counts against it too: Free never passes what the host really has
	// available beyond that share (at most MaxKeepPercent; see Count).
	LimitPercent int
	// RunningReserveMB is the room kept for each running desktop to grow
	// in. 0 (the default) learns it per template: the working set its
	// desktops reach, less what the desktop uses now.
	RunningReserveMB int
}

// WithDefaults fills the zero fields.
func (p Policy) WithDefaults() Policy {
	if p.LimitPercent <= 0 {
		p.LimitPercent = DefaultLimitPercent
	}
	return p
}

// Validate checks the policy's bounds, naming the field.
func (p Policy) Validate() error {
	if p.LimitPercent < 0 || p.LimitPercent > 100 {
		return fmt.Errorf("memory limit percent: %d is not between 1 and 100", p.LimitPercent)
	}
	if p.RunningReserveMB < 0 {
		return fmt.Errorf("running reserve: %d MB is negative", p.RunningReserveMB)
	}
	return nil
}

// Desktop is one VM (or one being made) as the arithmetic sees it.
type Desktop struct {
	Template string
	// Running desktops get a reserve to grow in; paused ones keep their
	// footprint.
	Running bool
	// FootprintMB is what its process uses, measured; 0 when not measured
	// yet (it then counts at ExpectMB).
	FootprintMB int
	// ExpectMB is what a desktop being made (or not measured yet) is
	// expected to use: its template's clone size, or its whole guest
	// memory when nothing was measured.
	ExpectMB int
}

// Account is a host's memory as admission sees it, in MiB.
type Account struct {
	TotalMB, AvailableMB, LimitMB int
	// UsedMB is what the desktops' processes use, measured.
	UsedMB int
	// ReservedMB is room held for desktops being made or not measured yet
	// (at their expected size), for running desktops to grow in, and for
	// paused ones to run as many at once as lately did.
	ReservedMB int
	// FreeMB is what a new desktop may still take: the limit less used
	// and reserved, and never more than the host has available beyond
	// the share it keeps (see Count).
	FreeMB int
	// Running and Paused count the desktops with a process.
	Running, Paused int
	// PressureAvg10 is the host's (see Host).
	PressureAvg10 float64
}

// Count sums the desktops against the host. Free is what is left under
// the limit after what the desktops use and the reserves, and never more
// than the host has available beyond a share it keeps: 100 - LimitPercent,
// at most MaxKeepPercent. The host's own use thus counts too, while a
// host of paused desktops is not held back by a share meant for desktops
// that run: those have reserves of their own, for the desktops running
// now (their working set) and for as many more of a template as ran at
// once lately (Book.ObserveBusy).
func Count(h Host, p Policy, book *Book, ds []Desktop) Account {
	p = p.WithDefaults()
	a := Account{TotalMB: h.TotalMB, AvailableMB: h.AvailableMB, LimitMB: h.TotalMB * p.LimitPercent / 100, PressureAvg10: h.PressureAvg10}
	running := map[string]int{}
	for _, d := range ds {
		if d.Running {
			a.Running++
			running[d.Template]++
		} else {
			a.Paused++
		}
		if d.FootprintMB <= 0 {
			a.ReservedMB += d.ExpectMB
			continue
		}
		a.UsedMB += d.FootprintMB
		if d.Running {
			a.ReservedMB += runningReserve(p, book, d)
		}
	}
	if book != nil {
		a.ReservedMB += book.busyReserve(running)
	}
	keep := min(100-p.LimitPercent, MaxKeepPercent)
	a.FreeMB = min(a.LimitMB-a.UsedMB-a.ReservedMB, h.AvailableMB-h.TotalMB*keep/100-a.ReservedMB)
	return a
}

func runningReserve(p Policy, book *Book, d Desktop) int {
	if p.RunningReserveMB > 0 {
		return p.RunningReserveMB
	}
	if book == nil {
		return 0
	}
	return max(0, book.Profile(d.Template).WorkingSetMB-d.FootprintMB)
}

// Fits reports whether a desktop expected to use mb more fits.
func (a Account) Fits(mb int) bool { return mb <= a.FreeMB }

// HostFloorPercent is the share of host memory that stays available when
// a desktop that exists is brought back past the limit (see FitsExisting).
const HostFloorPercent = 3

// FitsExisting reports whether a desktop that exists (saved to disk and
// claimed, or reset to its snapshot) may come back expecting mb more. It
// may go past the limit, which is for new desktops: a claim of a desktop
// that exists must not fail while the host really has the room. It is
// refused only when less than HostFloorPercent of host memory would stay
// available; the node's pressure policy then moves idle desktops to disk.
func (a Account) FitsExisting(mb int) bool {
	return a.AvailableMB-mb >= a.TotalMB*HostFloorPercent/100
}

// More is how many more desktops of mb each fit now.
func (a Account) More(mb int) int {
	if mb <= 0 || a.FreeMB <= 0 {
		return 0
	}
	return a.FreeMB / mb
}

// Refusal is the error text of a desktop that does not fit.
func (a Account) Refusal(what string, mb int) string {
	return fmt.Sprintf("not enough host memory for %s: it is expected to use %d MiB, %d MiB are free (desktops use %d MiB and %d MiB are reserved, of a limit of %d MiB; the host has %d MiB available of %d MiB)",
		what, mb, max(a.FreeMB, 0), a.UsedMB, a.ReservedMB, a.LimitMB, a.AvailableMB, a.TotalMB)
}

// Profile is what a template's desktops were measured to use, in MiB.
type Profile struct {
	// GuestMB is the guest memory: what a desktop counts at until
	// something was measured.
	GuestMB int
	// CloneMB is a readied clone's footprint: paused after it ran once
	// (its identity written, and under TCG its guest's code translated).
	CloneMB int
	// ColdMB is a fresh clone's footprint as cloned, never run; measured
	// only where clones stay so until they are readied on request (0
	// where every clone is readied).
	ColdMB int
	// WorkingSetMB is the largest footprint a running desktop of the
	// template was seen to reach (first measured on the template's own
	// VM when it was built).
	WorkingSetMB int
}

// Expect is what a new clone of the template is expected to use: as
// cloned where clones stay so (ColdMB), else readied.
func (p Profile) Expect() int {
	if p.ColdMB > 0 {
		return p.ColdMB
	}
	return p.Readied()
}

// Readied is what a readied clone of the template is expected to use.
func (p Profile) Readied() int {
	if p.CloneMB > 0 {
		return p.CloneMB
	}
	return p.GuestMB
}

// Book keeps the templates' profiles and refines them from what their
// desktops are measured to use. It is safe for concurrent use.
type Book struct {
	mu sync.Mutex
	m  map[string]Profile
	// busy is, per template, how many of its desktops ran at once lately.
	busy map[string]*Peak
	// Now is the clock of the busy peaks (time.Now when nil).
	Now func() time.Time
}

// NewBook returns an empty book.
func NewBook() *Book { return &Book{m: map[string]Profile{}, busy: map[string]*Peak{}} }

// BusyWindow is how far back a template's most desktops running at once
// count for its reserve.
const BusyWindow = 15 * time.Minute

// ObserveBusy records how many desktops of each template run now: those
// in running, and none of the others.
func (b *Book) ObserveBusy(running map[string]int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.Now != nil {
		now = b.Now()
	}
	for tpl, n := range running {
		if b.busy[tpl] == nil && n > 0 {
			b.busy[tpl] = &Peak{Window: BusyWindow}
		}
	}
	for tpl, pk := range b.busy {
		if pk.Observe(running[tpl], now) == 0 {
			delete(b.busy, tpl)
		}
	}
}

// busyReserve is the room for the paused desktops of each template to run
// as many at once as ran lately, beyond the running counted in running:
// each grows from a readied clone to the working set.
func (b *Book) busyReserve(running map[string]int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	mb := 0
	for tpl, pk := range b.busy {
		p := b.m[tpl]
		if more := pk.Max() - running[tpl]; more > 0 && p.WorkingSetMB > p.Readied() {
			mb += more * (p.WorkingSetMB - p.Readied())
		}
	}
	return mb
}

// Set records what is known of a template (from when it was built).
// Fields left zero keep what the book has.
func (b *Book) Set(tpl string, p Profile) {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.m[tpl]
	if p.GuestMB > 0 {
		cur.GuestMB = p.GuestMB
	}
	if p.CloneMB > 0 {
		cur.CloneMB = p.CloneMB
	}
	if p.ColdMB > 0 {
		cur.ColdMB = p.ColdMB
	}
	cur.WorkingSetMB = max(cur.WorkingSetMB, p.WorkingSetMB)
	b.m[tpl] = cur
}

// Profile returns what is known of a template.
func (b *Book) Profile(tpl string) Profile {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[tpl]
}

// Forget drops a template.
func (b *Book) Forget(tpl string) {
	b.mu.Lock()
	delete(b.m, tpl)
	delete(b.busy, tpl)
	b.mu.Unlock()
}

// ObserveClone refines a template's clone size from a fresh clone's
// footprint: a larger one is taken at once, a smaller one pulls the size
// down by an eighth of the difference (one small clone does not make the
// next ones small).
func (b *Book) ObserveClone(tpl string, mb int) {
	b.observe(tpl, mb, func(p *Profile) *int { return &p.CloneMB })
}

// ObserveCold refines a template's cold size (ColdMB) the same way, from
// a fresh clone that stays as cloned.
func (b *Book) ObserveCold(tpl string, mb int) {
	b.observe(tpl, mb, func(p *Profile) *int { return &p.ColdMB })
}

func (b *Book) observe(tpl string, mb int, field func(*Profile) *int) {
	if mb <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.m[tpl]
	f := field(&p)
	if mb >= *f || *f == 0 {
		*f = mb
	} else {
		*f -= (*f - mb) / 8
	}
	b.m[tpl] = p
}

// ObserveRunning refines a template's working set from a running
// desktop's footprint: the largest seen.
func (b *Book) ObserveRunning(tpl string, mb int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.m[tpl]
	if mb > p.WorkingSetMB {
		p.WorkingSetMB = mb
		b.m[tpl] = p
	}
}

// Peak is the most of a count seen over a sliding window of time. It is
// not safe for concurrent use.
type Peak struct {
	Window  time.Duration
	samples []peakSample
}

type peakSample struct {
	at time.Time
	n  int
}

// Observe records n at now and returns the most seen within the window.
func (p *Peak) Observe(n int, now time.Time) int {
	i := 0
	for i < len(p.samples) && now.Sub(p.samples[i].at) > p.Window {
		i++
	}
	// Keep only the samples that can still be the most: a sample is
	// dropped once a later one is as large.
	s := p.samples[i:]
	for len(s) > 0 && s[len(s)-1].n <= n {
		s = s[:len(s)-1]
	}
	p.samples = append(s, peakSample{now, n})
	return p.samples[0].n
}

// Max is the most seen within the window at the last Observe.
func (p *Peak) Max() int {
	if len(p.samples) == 0 {
		return 0
	}
	return p.samples[0].n
}
