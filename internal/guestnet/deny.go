package guestnet

import (
	"context"
	"net/netip"
	"sync/atomic"
	"time"
)

// Denial reports refused connections or DNS questions that share protocol,
// address, reason and rule: the first at once, the rest of an interval
// coalesced into one report at its end.
type Denial struct {
	// Time is when the first denial of this report happened.
	Time time.Time
	// Proto is "tcp" for a connection, "dns" for a question.
	Proto string
	// Dest is the destination as judged, for "tcp": a connection to the
	// gateway appears as 127.0.0.1. Its port is the first denial's; the
	// report covers every port of the address. Zero for "dns".
	Dest netip.AddrPort
	// Name is a name the guest resolved to Dest's address, or the name
	// asked for in a "dns" denial; empty when none is known.
	Name string
	// Reason is why, and Rule the Deny rule as written, or the built-in
	// range or host address, or the limit, that refused; empty for
	// ReasonNotAllowed.
	Reason Reason
	Rule   string
	// Count is how many denials this report stands for: 1 for the first,
	// the number since for a coalesced one.
	Count int
}

// Bounds of OnDeny's calls per interval: new keys reported at once, and
// keys tracked (past them a denial is only counted in
// Stats.DenialsUnreported).
const (
	maxReportNow  = 16
	maxReportKeys = 64
	denyQueueLen  = 256
)

type denyKey struct {
	proto  string
	addr   netip.Addr
	reason Reason
	rule   string
}

// denyReporter calls OnDeny from one goroutine, coalescing by key over an
// interval. The packet path only does a non-blocking send to it.
type denyReporter struct {
	fn         func(Denial)
	interval   time.Duration
	in         chan Denial
	unreported *atomic.Uint64
}

func newDenyReporter(fn func(Denial), interval time.Duration, unreported *atomic.Uint64) *denyReporter {
	return &denyReporter{fn: fn, interval: interval, in: make(chan Denial, denyQueueLen), unreported: unreported}
}

// report queues d; a full queue counts it as unreported rather than wait.
// A nil reporter does nothing.
func (r *denyReporter) report(d Denial) {
	if r == nil {
		return
	}
	select {
	case r.in <- d:
	default:
		r.unreported.Add(1)
	}
}

// window is what one interval has reported: a key present was reported
// (or is hot from the last interval); pending holds what it coalesces.
type window struct {
	keys map[denyKey]*Denial // pending report, or nil
	now  int                 // reported at once this interval
}

// run reports until ctx ends, then reports what is pending and returns.
func (r *denyReporter) run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	w := window{keys: make(map[denyKey]*Denial)}
	for {
		select {
		case d := <-r.in:
			r.add(&w, d)
		case <-t.C:
			w = r.flush(w)
		case <-ctx.Done():
			for {
				select {
				case d := <-r.in:
					r.add(&w, d)
				default:
					r.flush(w)
					return
				}
			}
		}
	}
}

func (r *denyReporter) add(w *window, d Denial) {
	d.Count = 1
	k := denyKey{d.Proto, d.Dest.Addr(), d.Reason, d.Rule}
	if k.proto == "dns" {
		k.rule += "\x00" + d.Name
	}
	if p, ok := w.keys[k]; ok {
		if p == nil {
			w.keys[k] = &d
		} else {
			p.Count++
		}
		return
	}
	if len(w.keys) >= maxReportKeys {
		r.unreported.Add(1)
		return
	}
	if w.now < maxReportNow {
		w.now++
		w.keys[k] = nil
		r.fn(d)
		return
	}
	w.keys[k] = &d
}

// flush reports what is pending and returns the next window, in which the
// keys that had something pending stay hot: a key hammered without pause is
// reported once an interval.
func (r *denyReporter) flush(w window) window {
	next := window{keys: make(map[denyKey]*Denial)}
	for k, p := range w.keys {
		if p != nil {
			r.fn(*p)
			next.keys[k] = nil
		}
	}
	return next
}
