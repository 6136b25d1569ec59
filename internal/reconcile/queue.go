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

	"k8s.io/client-go/util/workqueue"
)

// Result tells the queue what to do with a key after a reconcile.
type Result struct {
	// RequeueAfter, when set, looks at the key again after this delay.
	RequeueAfter time.Duration
}

// ReconcileFunc brings the world in line with the object named by key.
type ReconcileFunc func(ctx context.Context, key string) (Result, error)

// Queue is client-go's work queue with controller-runtime's semantics: a
// key waiting twice is processed once, a key is never processed by two
// workers at once (a key added while it is processed is processed again
// after), a key waiting for a delay keeps the earlier deadline, failed keys
// come back with exponential backoff (100 ms doubling to 60 s), and panics
// are recovered.
type Queue struct {
	name string
	log  *slog.Logger
	q    workqueue.TypedRateLimitingInterface[string]

	// observe, when set before Run, hears of every reconcile's outcome.
	observe func(err error)
}

// NewQueue returns an empty queue.
func NewQueue(name string, log *slog.Logger) *Queue {
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 60*time.Second)
	return &Queue{name: name, log: log,
		q: workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[string]{Name: name})}
}

// Add queues key.
func (q *Queue) Add(key string) { q.q.Add(key) }

// AddAfter queues key after d. When the key already waits for a delay,
// the earlier deadline wins: a reconciler that asks to look again in an
// hour must not postpone a retry due in a second.
func (q *Queue) AddAfter(key string, d time.Duration) { q.q.AddAfter(key, d) }

// Len is the number of keys waiting.
func (q *Queue) Len() int { return q.q.Len() }

// ShutDown stops the workers once their current keys are done.
func (q *Queue) ShutDown() { q.q.ShutDown() }

// Run processes keys with n workers until ctx ends.
func (q *Queue) Run(ctx context.Context, n int, fn ReconcileFunc) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key, shutdown := q.q.Get()
				if shutdown {
					return
				}
				if ctx.Err() != nil {
					// Shut down: the keys still waiting are left, as
					// the workers stop after their current ones.
					q.q.Done(key)
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
	defer q.q.Done(key)
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
	if err != nil {
		if ctx.Err() == nil {
			q.log.Warn("reconcile failed", "controller", q.name, "key", key, "attempt", q.q.NumRequeues(key)+1, "err", err)
			q.q.AddRateLimited(key)
		}
		return
	}
	q.q.Forget(key)
	if res.RequeueAfter > 0 {
		q.q.AddAfter(key, res.RequeueAfter)
	}
}
