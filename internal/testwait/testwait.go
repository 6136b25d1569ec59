// Package testwait is what tests use to wait for a condition rather than
// for a fixed time.
package testwait

import "time"

// For calls cond until it holds or d has passed, and reports whether it
// held. It does not fail the test, so that goroutines may call it and
// callers say what they waited for.
func For(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
	}
}
