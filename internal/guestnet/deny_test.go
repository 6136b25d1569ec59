package guestnet

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

func TestDenyReporterBounds(t *testing.T) {
	var calls []Denial
	var unreported atomic.Uint64
	r := newDenyReporter(func(d Denial) { calls = append(calls, d) }, time.Hour, &unreported)
	w := window{keys: make(map[denyKey]*Denial)}
	deny := func(i int) Denial {
		return Denial{Proto: "tcp", Dest: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 80), Reason: ReasonBlocked}
	}
	// A scan of many addresses: the first maxReportNow at once, then
	// pending up to maxReportKeys keys, the rest only counted.
	const scanned = maxReportKeys + 10
	for i := range scanned {
		r.add(&w, deny(i))
	}
	if len(calls) != maxReportNow {
		t.Errorf("%d reported at once, want %d", len(calls), maxReportNow)
	}
	if got := unreported.Load(); got != scanned-maxReportKeys {
		t.Errorf("unreported = %d, want %d", got, scanned-maxReportKeys)
	}
	w = r.flush(w)
	if len(calls) != maxReportKeys {
		t.Errorf("%d reported after the interval, want %d", len(calls), maxReportKeys)
	}

	// A key hammered across intervals: once an interval, counts adding up.
	calls = nil
	w = r.flush(w)
	for range 3 {
		for range 10 {
			r.add(&w, deny(200))
		}
		w = r.flush(w)
	}
	total := 0
	for _, c := range calls {
		total += c.Count
	}
	if len(calls) != 4 || total != 30 || calls[0].Count != 1 {
		t.Errorf("hammered key: %d calls totalling %d (%+v), want 4 totalling 30", len(calls), total, calls)
	}
	// A quiet interval lets it go cold: the next is at once again.
	calls = nil
	w = r.flush(w)
	r.add(&w, deny(200))
	if len(calls) != 1 {
		t.Errorf("after a quiet interval: %d calls, want 1 at once", len(calls))
	}
}

func TestDenyReporterQueueFull(t *testing.T) {
	var unreported atomic.Uint64
	r := newDenyReporter(func(Denial) {}, time.Hour, &unreported)
	// Nothing runs the reporter: the queue fills and then only counts.
	for i := range denyQueueLen + 5 {
		r.report(Denial{Proto: "tcp", Rule: fmt.Sprint(i)})
	}
	if got := unreported.Load(); got != 5 {
		t.Errorf("unreported = %d, want 5", got)
	}
	var none *denyReporter
	none.report(Denial{}) // a Network without OnDeny
}
