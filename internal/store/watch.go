package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/hvkube/hvkube/internal/api"
)

var sqlReadOnly = sql.TxOptions{ReadOnly: true}

// Watch event types.
const (
	Added    = "ADDED"
	Modified = "MODIFIED"
	Deleted  = "DELETED"
)

// WatchEvent is one committed change.
type WatchEvent struct {
	Type   string     `json:"type"`
	Object api.Object `json:"object"`

	// prevLabels are a modified object's labels before the change: an
	// object that leaves a watch's selector is DELETED for that watch, one
	// that enters it ADDED.
	prevLabels map[string]string
}

// ErrWatchOverflow ends a watch whose reader fell too far behind. The
// events buffered before it was dropped are still delivered; the reader
// then watches again from the last revision it saw (WatchFrom), which
// replays what it missed or, if that is too much, answers api.ErrGone:
// then it lists again.
var ErrWatchOverflow = errors.New("watch: reader fell behind; watch again from the last revision seen")

// WatchBuffer is how many unread events a watcher may have unless
// Options.WatchBuffer says otherwise. A transaction whose changes do not
// fit in the room left drops the watcher with ErrWatchOverflow.
const WatchBuffer = 4096

// Watcher delivers committed changes of one kind (or events), in commit
// order. It ends when the context it was made with ends, or when the store
// drops it.
type Watcher interface {
	// Events is the stream of changes. It is closed when the watch ends;
	// Err then says why.
	Events() <-chan WatchEvent
	// Err is nil while the watch runs and after a clean stop.
	Err() error
	// From is the resourceVersion the watch starts after: that of the
	// listed objects, or the one asked for. Every change it delivers is
	// newer. Like every resourceVersion it is opaque: pass it back to
	// WatchFrom, never compare or compute with it.
	From() string
}

// watcher is SQLite's Watcher.
type watcher struct {
	kind string
	sel  api.Selector
	ch   chan WatchEvent
	from int64 // the revision the watch starts after

	once sync.Once
	err  error
	done chan struct{}
}

func (w *watcher) From() string { return formatRV(w.from) }

func (w *watcher) Events() <-chan WatchEvent { return w.ch }

func (w *watcher) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

// stop ends the watch with err (nil: a clean stop). The caller has taken w
// out of s.watchers first, or holds s.mu: nothing sends to a stopped
// watcher.
func (w *watcher) stop(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.done)
		close(w.ch)
	})
}

// ListAndWatch returns the current objects of kind matching sel and a
// Watcher of every later change, with no gap and no overlap between the two.
// The watcher ends when ctx ends. Pass api.KindEvent to watch the audit log
// (the list is then empty).
func (s *Store) ListAndWatch(ctx context.Context, kind string, sel api.Selector) ([]api.Object, Watcher, error) {
	items, w, err := s.listAndWatch(ctx, kind, sel, -1)
	if err != nil {
		return nil, nil, err
	}
	return items, w, nil
}

// WatchFrom returns a Watcher of the changes of kind after revision rv,
// with no initial list: the changes the log holds first, then each new one.
// An rv older than the log reaches (compacted away), newer than the store,
// or with more changes since than a watcher buffers is an error wrapping
// api.ErrGone: list again, then watch from the list's revision.
func (s *Store) WatchFrom(ctx context.Context, kind string, sel api.Selector, rv string) (Watcher, error) {
	from, err := parseRV("resourceVersion", rv)
	if err != nil {
		return nil, err
	}
	_, w, err := s.listAndWatch(ctx, kind, sel, from)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// listAndWatch registers a watcher; from < 0 lists first, otherwise from
// must be the current revision.
func (s *Store) listAndWatch(ctx context.Context, kind string, sel api.Selector, from int64) ([]api.Object, *watcher, error) {
	w := &watcher{kind: kind, sel: sel, ch: make(chan WatchEvent, s.watchBuffer), done: make(chan struct{})}
	// Holding the write lock means nothing commits between the list (or
	// the revision check) and the registration.
	s.writeMu.Lock()
	var items []api.Object
	switch {
	case from >= 0:
		if err := s.replay(ctx, w, from); err != nil {
			s.writeMu.Unlock()
			return nil, nil, err
		}
		w.from = from
	case kind != api.KindEvent:
		var err error
		items, w.from, err = s.listAt(ctx, kind, sel)
		if err != nil {
			s.writeMu.Unlock()
			return nil, nil, err
		}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.writeMu.Unlock()
		return nil, nil, fmt.Errorf("watch %s: store closed", kind)
	}
	s.watchers[w] = struct{}{}
	s.mu.Unlock()
	s.writeMu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-w.done:
		}
		s.mu.Lock()
		delete(s.watchers, w)
		s.mu.Unlock()
		w.stop(nil)
	}()
	return items, w, nil
}

// replay puts the logged changes of w's kind after revision from into w.
// The caller holds writeMu, so nothing commits meanwhile.
func (s *Store) replay(ctx context.Context, w *watcher, from int64) error {
	var cur, compacted int64
	if err := s.r.QueryRowContext(ctx, `SELECT rv, compacted_rv FROM revision WHERE id = 1`).Scan(&cur, &compacted); err != nil {
		return fmt.Errorf("watch %s: %w", w.kind, err)
	}
	switch {
	case from > cur:
		return fmt.Errorf("resourceVersion %d is newer than the store's (%d): list again and watch from the list's resourceVersion: %w", from, cur, api.ErrGone)
	case from < compacted:
		return fmt.Errorf("resourceVersion %d is too old: the changes up to %d were compacted; list again and watch from the list's resourceVersion: %w", from, compacted, api.ErrGone)
	case from == cur:
		return nil
	}
	rows, err := s.r.QueryContext(ctx, `SELECT type, data, prev_labels FROM changes WHERE kind = ? AND rv > ? ORDER BY rv`, w.kind, from)
	if err != nil {
		return fmt.Errorf("watch %s: %w", w.kind, err)
	}
	defer rows.Close()
	for rows.Next() {
		var typ string
		var data []byte
		var prev sql.NullString
		if err := rows.Scan(&typ, &data, &prev); err != nil {
			return fmt.Errorf("watch %s: %w", w.kind, err)
		}
		o, err := decodeRow(w.kind, data)
		if err != nil {
			return err
		}
		ev := WatchEvent{Type: typ, Object: o}
		if prev.Valid {
			json.Unmarshal([]byte(prev.String), &ev.prevLabels)
		}
		if typ := w.view(ev); typ != "" {
			select {
			case w.ch <- WatchEvent{Type: typ, Object: o}:
			default:
				return fmt.Errorf("more than %d changes since resourceVersion %d: list again: %w", cap(w.ch), from, api.ErrGone)
			}
		}
	}
	return rows.Err()
}

// publish hands one transaction's committed changes to the watchers. It
// never blocks, and a watcher gets the transaction whole or not at all:
// one whose buffer cannot take all of its share is dropped (removed, then
// stopped with ErrWatchOverflow, which closes its channel once) and never
// sent to again. Its reader still gets what was buffered before, and
// resumes after the last of it.
//
// publish is the only sender once a watcher is registered, and it runs
// under s.mu; the reader only takes from the buffer, so the room counted
// here can only grow before the sends.
func (s *Store) publish(evs []WatchEvent) {
	if len(evs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var batch []WatchEvent
	for w := range s.watchers {
		batch = w.share(evs, batch[:0])
		if len(batch) == 0 {
			continue
		}
		if cap(w.ch)-len(w.ch) < len(batch) {
			delete(s.watchers, w)
			w.stop(ErrWatchOverflow)
			continue
		}
		for _, ev := range batch {
			w.ch <- ev
		}
	}
}

// share appends to dst the events of evs that w sees, typed as w sees
// them.
func (w *watcher) share(evs, dst []WatchEvent) []WatchEvent {
	for _, ev := range evs {
		if ev.Object.GetTypeMeta().Kind != w.kind {
			continue
		}
		typ := ev.Type
		if w.kind != api.KindEvent {
			if typ = w.view(ev); typ == "" {
				continue
			}
		}
		dst = append(dst, WatchEvent{Type: typ, Object: ev.Object})
	}
	return dst
}

// view is the type of ev as this watcher's selector sees it, or "" if the
// watcher does not see it: a modification that takes an object out of the
// selector is a deletion, one that brings it in an addition.
func (w *watcher) view(ev WatchEvent) string {
	is := w.sel.Matches(ev.Object.GetMeta().Labels)
	if ev.Type != Modified {
		if is {
			return ev.Type
		}
		return ""
	}
	was := w.sel.Matches(ev.prevLabels)
	switch {
	case was && is:
		return Modified
	case is:
		return Added
	case was:
		return Deleted
	}
	return ""
}

func isNotFound(err error) bool { return errors.Is(err, api.ErrNotFound) }
