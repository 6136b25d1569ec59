package store

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
)

// Group commit. Every object write (Create, Update, UpdateStatus, Delete,
// UpdateStatusGroups) is queued for one committer goroutine, which runs
// what is queued in one transaction: a commit's cost (the write lock, the
// journal's frames, the revision row written again) is paid once per batch
// rather than once per write. Each write runs inside a savepoint of its
// own, so a write that fails (a conflict, a missing object, an invalid
// update) is rolled back alone and the others still commit. A caller hears
// of its write only once the batch committed.
//
// There is no timer: a write that finds the committer idle is committed at
// once, and the writes that arrive while a commit runs make up the next
// batch, up to maxWriteBatch.

// maxWriteBatch bounds the writes committed in one transaction.
const maxWriteBatch = 256

// writeQueue is how many writes may wait for the committer before a
// writer waits for room.
const writeQueue = 1024

// Write request states: a request is taken by the committer or abandoned
// by its caller, whichever comes first.
const (
	writeQueued int32 = iota
	writeTaken
	writeAbandoned
)

// writeReq is one queued write: fn runs in a savepoint of the batch's
// transaction, and done closes once the batch committed or failed, with
// err set.
type writeReq struct {
	ctx   context.Context
	fn    func(tx *Tx) error
	state atomic.Int32
	err   error
	done  chan struct{}
}

// write runs fn in the next group commit and returns once that commit is
// done: nil means fn's changes are committed. fn's error is returned as it
// is (and only fn's changes are rolled back); a failed commit fails every
// write of the batch. If ctx ends before the committer takes the write, it
// is never run.
func (s *Store) write(ctx context.Context, fn func(tx *Tx) error) error {
	req := &writeReq{ctx: ctx, fn: fn, done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errStoreClosed
	}
	s.writers.Add(1)
	s.mu.Unlock()
	select {
	case s.writes <- req:
		s.writers.Done()
	case <-ctx.Done():
		s.writers.Done()
		return ctx.Err()
	}
	select {
	case <-req.done:
	case <-ctx.Done():
		if req.state.CompareAndSwap(writeQueued, writeAbandoned) {
			return ctx.Err()
		}
		// The committer has it: its commit says whether it landed.
		<-req.done
	}
	if p, ok := req.err.(*writePanic); ok {
		panic(fmt.Sprintf("%v\n\nin the store's committer:\n%s", p.value, p.stack))
	}
	return req.err
}

// writePanic is a write's fn that panicked on the committer: it is
// rolled back like a failed write, and the panic goes on in the caller's
// goroutine, as it did when writes ran there.
type writePanic struct {
	value any
	stack []byte
}

func (p *writePanic) Error() string { return fmt.Sprintf("write panicked: %v", p.value) }

// run runs the write's fn, turning a panic into a writePanic.
func (r *writeReq) run(tx *Tx) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &writePanic{value: v, stack: debug.Stack()}
		}
	}()
	return r.fn(tx)
}

// errStoreClosed is what a write after Close returns.
var errStoreClosed = errors.New("store: closed")

// commitWrites is the committer: it takes the queued writes a batch at a
// time until the queue is closed and empty.
func (s *Store) commitWrites() {
	defer close(s.writesDone)
	batch := make([]*writeReq, 0, maxWriteBatch)
	for req := range s.writes {
		batch = append(batch[:0], req)
	more:
		for len(batch) < maxWriteBatch {
			select {
			case r, ok := <-s.writes:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		if testHookWriteBatch != nil {
			testHookWriteBatch(len(batch))
		}
		s.commitBatch(batch)
		clear(batch)
	}
}

// testHookWriteBatch, nil but in tests, runs when the committer has taken
// a batch of n writes, before its transaction.
var testHookWriteBatch func(n int)

// commitBatch runs the batch's live writes in one transaction, publishes
// what committed and tells every caller.
func (s *Store) commitBatch(batch []*writeReq) {
	live := batch[:0:0]
	for _, r := range batch {
		if !r.state.CompareAndSwap(writeQueued, writeTaken) {
			continue // its caller gave up
		}
		if err := r.ctx.Err(); err != nil {
			r.finish(err)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	errs := make([]error, len(live))
	err := s.Tx(context.Background(), func(tx *Tx) error {
		for i, r := range live {
			var err error
			if errs[i], err = tx.savepoint(r.run); err != nil {
				return err
			}
		}
		return nil
	})
	for i, r := range live {
		if err != nil {
			r.finish(err)
			continue
		}
		r.finish(s.classify(errs[i]))
	}
}

// finish hands the caller its result.
func (r *writeReq) finish(err error) {
	r.err = err
	close(r.done)
}

// savepoint runs fn in a savepoint: if fn fails its changes are rolled
// back (and its watch events and counts dropped) while the transaction
// goes on, and fnErr is fn's error. err is a failure of the transaction
// itself: SQLite rolls a transaction back whole on some errors (a full
// disk, an I/O error), and then nothing of it may commit.
func (tx *Tx) savepoint(fn func(tx *Tx) error) (fnErr, err error) {
	if _, err := tx.q.ExecContext(tx.ctx, sqlSavepoint); err != nil {
		return nil, fmt.Errorf("savepoint: %w", err)
	}
	pending, events, changes, rv := len(tx.pending), tx.events, tx.changes, tx.rv
	if fnErr = fn(tx); fnErr != nil {
		if _, err := tx.q.ExecContext(tx.ctx, sqlRollbackTo); err != nil {
			return fnErr, fmt.Errorf("roll back a failed write (%w): %w", fnErr, err)
		}
		clear(tx.pending[pending:])
		tx.pending, tx.events, tx.changes, tx.rv = tx.pending[:pending], events, changes, rv
	}
	if _, err := tx.q.ExecContext(tx.ctx, sqlRelease); err != nil {
		return fnErr, fmt.Errorf("release savepoint: %w", err)
	}
	return fnErr, nil
}
