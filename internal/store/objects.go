package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// Get returns the stored object, or an error wrapping api.ErrNotFound.
func (s *Store) Get(ctx context.Context, kind, name string) (api.Object, error) {
	return getObject(ctx, preparedQ{c: s.rstmts}, kind, name)
}

// List returns the objects of a kind whose labels match sel, ordered by name,
// and the store revision they were read at.
func (s *Store) List(ctx context.Context, kind string, sel api.Selector) ([]api.Object, string, error) {
	items, rv, err := s.listAt(ctx, kind, sel)
	return items, formatRV(rv), err
}

// listAt is List with the revision as the number it is here.
func (s *Store) listAt(ctx context.Context, kind string, sel api.Selector) ([]api.Object, int64, error) {
	tx, err := s.r.BeginTx(ctx, &sqlReadOnly)
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", kind, err)
	}
	defer tx.Rollback()
	return listObjects(ctx, preparedQ{c: s.rstmts, tx: tx}, kind, sel)
}

// ListRaw is List without decoding, a page at a time: each item is the
// object's stored JSON, and next is the name the next page starts after
// ("" on the last page). Each page is read at the revision it returns.
func (s *Store) ListRaw(ctx context.Context, kind string, pg Page) (items []json.RawMessage, rv string, next string, err error) {
	tx, err := s.r.BeginTx(ctx, &sqlReadOnly)
	if err != nil {
		return nil, "", "", fmt.Errorf("list %s: %w", kind, err)
	}
	defer tx.Rollback()
	items, n, next, err := listRaw(ctx, tx, kind, pg)
	return items, formatRV(n), next, err
}

// The object writes below are group committed (see write): each returns
// once the transaction it shared with the writes beside it committed.

// Create stores a new object; see Tx.Create.
func (s *Store) Create(ctx context.Context, o api.Object) (api.Object, error) {
	var out api.Object
	err := s.write(ctx, func(tx *Tx) error {
		var err error
		out, err = tx.Create(o)
		if err == nil && RecordsCreated(o) {
			err = tx.Emit(out, api.EventNormal, "Created", fmt.Sprintf("%s %s created", o.GetTypeMeta().Kind, o.GetMeta().Name))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Update writes o over the stored object; see Tx.Update.
func (s *Store) Update(ctx context.Context, o api.Object) (api.Object, bool, error) {
	var out api.Object
	var changed bool
	err := s.write(ctx, func(tx *Tx) error {
		var err error
		out, changed, err = tx.Update(o)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return out, changed, nil
}

// UpdateStatus replaces the stored object's status; see Tx.UpdateStatus.
func (s *Store) UpdateStatus(ctx context.Context, o api.Object) (api.Object, error) {
	var out api.Object
	err := s.write(ctx, func(tx *Tx) error {
		var err error
		out, err = tx.UpdateStatus(o)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PatchStatus merges a patch into the stored object's status; see
// Tx.PatchStatus.
func (s *Store) PatchStatus(ctx context.Context, kind, name, rv string, patch []byte) (api.Object, error) {
	var out api.Object
	err := s.write(ctx, func(tx *Tx) error {
		var err error
		out, err = tx.PatchStatus(kind, name, rv, patch)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Delete removes an object; see Tx.Delete.
func (s *Store) Delete(ctx context.Context, kind, name string, opts DeleteOptions) (api.Object, bool, error) {
	var out api.Object
	var deleted bool
	err := s.write(ctx, func(tx *Tx) error {
		var err error
		out, deleted, err = tx.Delete(kind, name, opts)
		if err != nil {
			return err
		}
		msg := fmt.Sprintf("%s %s deleted", kind, name)
		if !deleted {
			msg = fmt.Sprintf("%s %s is being deleted", kind, name)
		}
		return tx.Emit(out, api.EventNormal, "Deleted", msg)
	})
	if err != nil {
		return nil, false, err
	}
	return out, deleted, nil
}

// eventRecord is an event waiting to be written, or (with done set) a
// marker that Flush waits on.
type eventRecord struct {
	obj                  api.Object
	typ, reason, message string
	done                 chan struct{}
}

// flushEvents returns once every event queued before it is written, so
// that a reader of the log sees the events recorded before its read, or
// once ctx ends. With the queue full it waits for room without holding
// s.mu: the writer takes s.mu (to publish) inside its transaction, and
// every write waits for that transaction.
func (s *Store) flushEvents(ctx context.Context) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.flushers.Add(1)
	s.mu.Unlock()
	done := make(chan struct{})
	if testHookFlushWaits != nil {
		testHookFlushWaits()
	}
	select {
	case s.events <- eventRecord{done: done}:
		s.flushers.Done()
	case <-ctx.Done():
		s.flushers.Done()
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Test hooks, nil but in tests: testHookEventBatch runs when the event
// writer has taken a batch, before its transaction; testHookFlushWaits
// when a reader is about to wait for the event queue.
var testHookEventBatch, testHookFlushWaits func()

// maxEventBatch bounds the events written in one transaction.
const maxEventBatch = 500

// RecordEvent adds an event to the audit log. Controllers record many
// events, each of which would cost a write transaction of its own on the
// store's one writer; they are queued instead and written together a few
// at a time, so an event may reach the log (and its watchers) a few
// milliseconds after the call. With the queue full, the call writes the
// event itself, group committed with the object writes.
func (s *Store) RecordEvent(ctx context.Context, o api.Object, eventType, reason, message string) error {
	rec := eventRecord{obj: api.DeepCopy(o), typ: eventType, reason: reason, message: message}
	s.mu.Lock()
	if !s.closed {
		select {
		case s.events <- rec:
			s.mu.Unlock()
			return nil
		default:
		}
	}
	s.mu.Unlock()
	return s.write(ctx, func(tx *Tx) error { return tx.Emit(o, eventType, reason, message) })
}

// writeEvents writes queued events, a batch per transaction, until the
// queue is closed and empty.
func (s *Store) writeEvents() {
	defer close(s.eventsDone)
	for rec := range s.events {
		batch := []eventRecord{rec}
	more:
		for len(batch) < maxEventBatch {
			select {
			case r, ok := <-s.events:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		if testHookEventBatch != nil {
			testHookEventBatch()
		}
		err := s.Tx(context.Background(), func(tx *Tx) error {
			for _, r := range batch {
				if r.done != nil {
					continue
				}
				if err := tx.Emit(r.obj, r.typ, r.reason, r.message); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			s.log.Warn("record events", "events", len(batch), "err", err)
		}
		for _, r := range batch {
			if r.done != nil {
				close(r.done)
			}
		}
	}
}

// EventFilter narrows ListEvents.
type EventFilter struct {
	Kind  string // involved object's kind; empty is any
	Name  string // involved object's name; empty is any
	Since time.Time
	Limit int // newest N; 0 means 1000 (all, with AfterID)
	// After, when set, asks for every event after the event with this
	// resourceVersion. If the log no longer holds the events right after
	// it, or has no such event yet, the error wraps api.ErrGone.
	After string
}

// ListEvents returns events oldest first, including every event recorded
// before the call.
func (s *Store) ListEvents(ctx context.Context, f EventFilter) ([]*api.Event, error) {
	s.flushEvents(ctx)
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	q := `SELECT id, kind, name, uid, type, reason, message, ts FROM events WHERE 1=1`
	var args []any
	var after int64
	if f.After != "" {
		var err error
		if after, err = parseRV("resourceVersion", f.After); err != nil {
			return nil, err
		}
	}
	if after > 0 {
		var oldest, newest int64
		err := s.r.QueryRowContext(ctx, `SELECT COALESCE((SELECT MIN(id) FROM events), 0), COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)`).Scan(&oldest, &newest)
		if err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		switch {
		case after > newest:
			return nil, fmt.Errorf("resourceVersion %d is newer than the newest event (%d): %w", after, newest, api.ErrGone)
		case oldest > 0 && after < oldest-1:
			return nil, fmt.Errorf("the events after resourceVersion %d were pruned (the log keeps the newest %d): list again: %w", after, s.maxEvents, api.ErrGone)
		}
		q += ` AND id > ?`
		args = append(args, after)
		if f.Limit <= 0 {
			limit = s.maxEvents
		}
	}
	if f.Kind != "" {
		q += ` AND kind = ?`
		args = append(args, f.Kind)
	}
	if f.Name != "" {
		q += ` AND name = ?`
		args = append(args, f.Name)
	}
	if !f.Since.IsZero() {
		q += ` AND ts >= ?`
		args = append(args, f.Since.UTC().Format(time.RFC3339Nano))
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	var out []*api.Event
	for rows.Next() {
		var id int64
		var ts string
		ev := &api.Event{TypeMeta: api.TypeMeta{APIVersion: api.Version, Kind: api.KindEvent}}
		if err := rows.Scan(&id, &ev.InvolvedObject.Kind, &ev.InvolvedObject.Name, &ev.InvolvedObject.UID, &ev.Type, &ev.Reason, &ev.Message, &ts); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		ev.Timestamp, _ = time.Parse(time.RFC3339Nano, ts)
		fillEventMeta(ev, id)
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// Revision returns the store's current revision.
//
// It counts the object writes this store ever committed, which is what
// benchmarks read it for; callers that watch pass resourceVersions, never
// this number.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	var rv int64
	err := preparedQ{c: s.rstmts}.QueryRowContext(ctx, sqlGetRV).Scan(&rv)
	return rv, err
}

// formatRV is a revision as the resourceVersion callers see: SQLite's
// revisions are decimal, but callers treat them as opaque.
func formatRV(rv int64) string { return strconv.FormatInt(rv, 10) }

// parseRV reads back a resourceVersion this store gave out; a string it
// did not give out is an error naming field.
func parseRV(field, rv string) (int64, error) {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n < 0 {
		return 0, api.Invalid(field, "%.64q is not a resourceVersion (one from a list or an object)", rv)
	}
	return n, nil
}

// UpdateStatusGroups writes groups of status updates in one transaction:
// within a group the updates land together or not at all, each
// conditioned on its resourceVersion as in UpdateStatus. A group that fails
// (a conflict, a missing object) is left out, with its error at its index
// in errs, and the others still land; err reports a failure of the
// transaction as a whole. It lets a caller that writes many small groups
// (the scheduler's claim and binding, for a whole round) pay for one
// commit instead of one per write; the commit is shared with the other
// writes queued meanwhile.
func (s *Store) UpdateStatusGroups(ctx context.Context, groups [][]api.Object) (out [][]api.Object, errs []error, err error) {
	out = make([][]api.Object, len(groups))
	errs = make([]error, len(groups))
	err = s.write(ctx, func(tx *Tx) error {
		for i, g := range groups {
			var written []api.Object
			gerr, err := tx.savepoint(func(tx *Tx) error {
				for _, o := range g {
					w, err := tx.UpdateStatus(o)
					if err != nil {
						return err
					}
					written = append(written, w)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if errs[i] = gerr; gerr == nil {
				out[i] = written
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out, errs, nil
}
