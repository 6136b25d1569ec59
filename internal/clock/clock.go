// Package clock holds the fake clock that tests inject where code takes a
// `now func() time.Time`, so that time-based rules (delays, timeouts, ages)
// are tested without waiting, and a sleep that a context cuts short.
package clock

import (
	"context"
	"sync"
	"time"
)

// Fake is a clock that moves only when told to. It is safe for concurrent
// use.
type Fake struct {
	mu  sync.Mutex // guards now
	now time.Time
}

// NewFake returns a Fake clock at t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the clock's time; pass the method value as a now function.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *Fake) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Sleep waits d, or until ctx ends (then it returns ctx's error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
