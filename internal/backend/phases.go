package backend

import (
	"context"
	"sync"
	"time"
)

// Phases collects how long each step of backend calls took: a benchmark
// (or a debugging caller) puts one in the context with WithPhases, and the
// backend marks its steps on it. With none in the context, marking costs
// next to nothing.
type Phases struct {
	mu    sync.Mutex
	steps []Phase
}

// Phase is one timed step of a backend call.
type Phase struct {
	Name string
	Took time.Duration
}

type phasesKey struct{}

// WithPhases returns ctx carrying p.
func WithPhases(ctx context.Context, p *Phases) context.Context {
	return context.WithValue(ctx, phasesKey{}, p)
}

// Steps returns the steps recorded so far and forgets them.
func (p *Phases) Steps() []Phase {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.steps
	p.steps = nil
	return s
}

func (p *Phases) add(name string, d time.Duration) {
	p.mu.Lock()
	p.steps = append(p.steps, Phase{Name: name, Took: d})
	p.mu.Unlock()
}

// Stepper times the steps of one call, each from the end of the one
// before it.
type Stepper struct {
	p    *Phases
	last time.Time
}

// StartSteps starts timing steps for ctx's Phases, if it carries any.
func StartSteps(ctx context.Context) *Stepper {
	p, _ := ctx.Value(phasesKey{}).(*Phases)
	if p == nil {
		return &Stepper{}
	}
	return &Stepper{p: p, last: time.Now()}
}

// Mark records the step that has just ended as name.
func (s *Stepper) Mark(name string) {
	if s.p == nil {
		return
	}
	now := time.Now()
	s.p.add(name, now.Sub(s.last))
	s.last = now
}

// Skip starts the next step now, leaving the time since the last mark out
// of every step.
func (s *Stepper) Skip() {
	if s.p != nil {
		s.last = time.Now()
	}
}
