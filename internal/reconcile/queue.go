// Package reconcile runs hvkube's level-based reconcilers: the work queue
// that drives them, the Manager that feeds it from store watches, the
// caches the watches keep, and the write helpers reconcilers share
// (status updates with optimistic concurrency, finalizers, events). The
// controllers themselves live elsewhere: those that only read and write
// objects in package controller, those that own VMs in package node; both
// register with the same Manager. A reconciler re-reads the state it acts
// on every time; events only say which key to look at.
package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Result tells the queue what to do with a key after a reconcile.
type Result struct {
	// RequeueAfter, when set, looks at the key again after this delay.
	RequeueAfter time.Duration
}

// ReconcileFunc brings the world in line with the object named by key.
type ReconcileFunc func(ctx context.Context, key string) (Result, error)

// Queue is a work queue with controller-runtime's semantics: a key waiting
// twice is processed once, a key is never processed by two workers at once
// (a key added while it is processed is processed again after), failed keys
// come back with exponential backoff, and panics are recovered.
type Queue struct {
	name string
	log  *slog.Logger

	mu         sync.Mutex // guards the following fields
	cond       *sync.Cond
	order      []string
	dirty      map[string]bool
	processing map[string]bool
	failures   map[string]int
	timers     map[string]*delayed
	shutdown   bool

	// observe, when set before Run, hears of every reconcile's outcome.
	observe func(err error)
}

// delayed is a pending AddAfter.
type delayed struct {
	t  *time.Timer
	at time.Time
}

// NewQueue returns an empty queue.
func NewQueue(name string, log *slog.Logger) *Queue {
	q := &Queue{name: name, log: log, dirty: map[string]bool{}, processing: map[string]bool{}, failures: map[string]int{}, timers: map[string]*delayed{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Add queues key.
func (q *Queue) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(key)
}

func (q *Queue) addLocked(key string) {
	if q.shutdown || q.dirty[key] {
		return
	}
	q.dirty[key] = true
	if !q.processing[key] {
		q.order = append(q.order, key)
		q.cond.Signal()
	}
}

// AddAfter queues key after d. When the key already waits for a delay,
// the earlier deadline wins: a reconciler that asks to look again in an
// hour must not postpone a retry due in a second.
func (q *Queue) AddAfter(key string, d time.Duration) {
	if d <= 0 {
		q.Add(key)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	at := time.Now().Add(d)
	if p, ok := q.timers[key]; ok {
		if !p.at.After(at) {
			return
		}
		p.t.Stop()
	}
	p := &delayed{at: at}
	p.t = time.AfterFunc(d, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.timers[key] == p {
			delete(q.timers, key)
		}
		q.addLocked(key)
	})
	q.timers[key] = p
}

// backoff is the delay before retrying a key that failed n times.
func backoff(n int) time.Duration {
	d := 100 * time.Millisecond << min(n, 12)
	return min(d, 60*time.Second)
}

func (q *Queue) get() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) == 0 && !q.shutdown {
		q.cond.Wait()
	}
	if q.shutdown {
		return "", false
	}
	key := q.order[0]
	q.order = q.order[1:]
	q.processing[key] = true
	delete(q.dirty, key)
	return key, true
}

func (q *Queue) done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if q.dirty[key] {
		q.order = append(q.order, key)
		q.cond.Signal()
	}
}

// Len is the number of keys waiting.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.order)
}

// ShutDown stops the workers once their current keys are done.
func (q *Queue) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdown = true
	for _, p := range q.timers {
		p.t.Stop()
	}
	q.cond.Broadcast()
}

// Run processes keys with n workers until ctx ends.
func (q *Queue) Run(ctx context.Context, n int, fn ReconcileFunc) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key, ok := q.get()
				if !ok {
					return
				}
				q.process(ctx, key, fn)
			}
		}()
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
}

func (q *Queue) process(ctx context.Context, key string, fn ReconcileFunc) {
	defer q.done(key)
	res, err := func() (res Result, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		return fn(ctx, key)
	}()
	if q.observe != nil {
		q.observe(err)
	}
	q.mu.Lock()
	if err != nil {
		n := q.failures[key]
		q.failures[key] = n + 1
		q.mu.Unlock()
		if ctx.Err() == nil {
			q.log.Warn("reconcile failed", "controller", q.name, "key", key, "attempt", n+1, "err", err)
			q.AddAfter(key, backoff(n))
		}
		return
	}
	delete(q.failures, key)
	q.mu.Unlock()
	if res.RequeueAfter > 0 {
		q.AddAfter(key, res.RequeueAfter)
	}
}
