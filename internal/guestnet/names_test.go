package guestnet

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestNameTableExpires(t *testing.T) {
	tab := newNameTable(4)
	t0 := time.Unix(1000, 0)
	a := netip.MustParseAddr("203.0.113.1")
	tab.remember(a, "a.test", t0, t0.Add(time.Minute))
	tab.remember(a, "b.test", t0, t0.Add(time.Hour))
	tab.remember(a, "a.test", t0, t0.Add(time.Second)) // never shortens
	if got := tab.lookup(a, t0.Add(30*time.Second)); !slices.Equal(got, []string{"a.test", "b.test"}) {
		t.Errorf("lookup = %q", got)
	}
	if got := tab.lookup(a, t0.Add(2*time.Minute)); !slices.Equal(got, []string{"b.test"}) {
		t.Errorf("lookup after a.test expired = %q", got)
	}
	if got := tab.lookup(netip.MustParseAddr("203.0.113.2"), t0); got != nil {
		t.Errorf("lookup of an unknown address = %q", got)
	}
}

func TestNameTableBounded(t *testing.T) {
	tab := newNameTable(3)
	t0 := time.Unix(1000, 0)
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}) }
	// Address 1 lives longest, 2 shortest.
	tab.remember(addr(1), "one", t0, t0.Add(3*time.Hour))
	tab.remember(addr(2), "two", t0, t0.Add(time.Hour))
	tab.remember(addr(3), "three", t0, t0.Add(2*time.Hour))
	tab.remember(addr(4), "four", t0, t0.Add(2*time.Hour))
	if tab.len() != 3 {
		t.Fatalf("len = %d, want 3", tab.len())
	}
	if got := tab.lookup(addr(2), t0); got != nil {
		t.Errorf("the soonest to expire was kept: %q", got)
	}
	for _, i := range []int{1, 3, 4} {
		if got := tab.lookup(addr(i), t0); len(got) != 1 {
			t.Errorf("address %d forgotten", i)
		}
	}
	// Expired ones go first, all of them.
	later := t0.Add(150 * time.Minute) // 3 and 4 expired
	tab.remember(addr(5), "five", later, later.Add(time.Hour))
	if tab.len() != 2 {
		t.Errorf("len = %d after expiry, want 2", tab.len())
	}

	// Names per address are bounded too, the soonest to expire dropped.
	for i := range maxNamesPerAddr + 3 {
		tab.remember(addr(1), fmt.Sprintf("n%d.test", i), later, later.Add(time.Duration(i+1)*time.Minute))
	}
	got := tab.lookup(addr(1), later)
	if len(got) != maxNamesPerAddr || slices.Contains(got, "n0.test") || !slices.Contains(got, "one") {
		t.Errorf("names = %q, want %d without n0.test, with one", got, maxNamesPerAddr)
	}
}
