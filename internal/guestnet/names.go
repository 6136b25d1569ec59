package guestnet

import (
	"net/netip"
	"sync"
	"time"
)

// nameTable remembers which names the guest was told resolve to an address,
// so that name rules can judge a connection to that address. It is bounded:
// at most max addresses and maxNamesPerAddr names each; past that the
// entries that expire soonest are forgotten first.
type nameTable struct {
	max int

	mu     sync.Mutex // guards the following fields
	byAddr map[netip.Addr][]nameUntil
}

type nameUntil struct {
	name    string
	expires time.Time
}

func newNameTable(max int) *nameTable {
	return &nameTable{max: max, byAddr: make(map[netip.Addr][]nameUntil)}
}

// remember records that name resolves to addr until expires.
func (t *nameTable) remember(addr netip.Addr, name string, now, expires time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	names, ok := t.byAddr[addr]
	if !ok && len(t.byAddr) >= t.max {
		t.makeRoomLocked(now)
	}
	for i := range names {
		if names[i].name == name {
			if expires.After(names[i].expires) {
				names[i].expires = expires
			}
			return
		}
	}
	// Drop what has expired, then the name that expires soonest if still
	// full.
	kept := names[:0]
	for _, n := range names {
		if n.expires.After(now) {
			kept = append(kept, n)
		}
	}
	names = kept
	if len(names) >= maxNamesPerAddr {
		soonest := 0
		for i := range names {
			if names[i].expires.Before(names[soonest].expires) {
				soonest = i
			}
		}
		names = append(names[:soonest], names[soonest+1:]...)
	}
	t.byAddr[addr] = append(names, nameUntil{name, expires})
}

// makeRoomLocked forgets expired addresses, and if none had expired the
// address whose names all expire soonest.
func (t *nameTable) makeRoomLocked(now time.Time) {
	var victim netip.Addr
	var victimUntil time.Time
	for a, names := range t.byAddr {
		until := latest(names)
		if !until.After(now) {
			delete(t.byAddr, a)
			continue
		}
		if !victim.IsValid() || until.Before(victimUntil) {
			victim, victimUntil = a, until
		}
	}
	if len(t.byAddr) >= t.max && victim.IsValid() {
		delete(t.byAddr, victim)
	}
}

func latest(names []nameUntil) time.Time {
	var t time.Time
	for _, n := range names {
		if n.expires.After(t) {
			t = n.expires
		}
	}
	return t
}

// lookup returns the names remembered for addr that have not expired.
func (t *nameTable) lookup(addr netip.Addr, now time.Time) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, n := range t.byAddr[addr] {
		if n.expires.After(now) {
			out = append(out, n.name)
		}
	}
	return out
}

// len returns how many addresses are remembered, expired or not.
func (t *nameTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byAddr)
}
