// Package store keeps hvkube's objects and events in SQLite: WAL, one writer
// connection and a pool of readers, embedded migrations, optimistic
// concurrency on resourceVersion, and a watch stream of committed changes.
package store

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	_ "modernc.org/sqlite" // the pure-Go SQLite driver, so the server also builds for Windows

	"github.com/hvkube/hvkube/internal/api"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Options configure Open.
type Options struct {
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Logger; slog.Default when nil.
	Logger *slog.Logger
	// MaxEvents bounds the audit log; older events are pruned. 0 means 50,000.
	MaxEvents int
	// MaxChanges bounds the change log that watches resume from; older
	// changes are compacted away. 0 means 100,000.
	MaxChanges int
	// WatchBuffer is how many unread events a watcher may have before
	// it is dropped. 0 means WatchBuffer.
	WatchBuffer int
}

// Store is the SQLite-backed object store. It is safe for concurrent use.
type Store struct {
	w    *sql.DB // exactly one connection: SQLite has one writer anyway
	r    *sql.DB // readers
	path string  // the database file
	now  func() time.Time
	log  *slog.Logger

	maxEvents   int
	maxChanges  int
	watchBuffer int

	// writeMu serialises write transactions so that watchers see changes in
	// commit order.
	writeMu sync.Mutex

	// latest holds objects as they were last committed, decoded, for the
	// writer's reads (a status write reads its object first): copies of
	// their own, handed out only as copies. Guarded by writeMu; emptied
	// when a commit fails.
	latest map[objKey]api.Object

	// wstmts and rstmts are the writer's and the readers' prepared
	// statements.
	wstmts, rstmts *stmtCache

	// writes queues the object writes for commitWrites, which commits
	// them a batch per transaction; writesDone closes when it has
	// committed the last. writers counts the writes that may still send
	// to writes, which Close waits for before it closes the queue.
	writes     chan *writeReq
	writesDone chan struct{}
	writers    sync.WaitGroup

	// events queues RecordEvent's events for writeEvents; eventsDone
	// closes when it has written the last. flushers counts the
	// flushEvents calls that may still send to events, which Close waits
	// for before it closes the queue.
	events     chan eventRecord
	eventsDone chan struct{}
	flushers   sync.WaitGroup

	mu       sync.Mutex // guards the following fields
	watchers map[*watcher]struct{}
	closed   bool
	inserted int // events since the last prune
	logged   int // changes since the last compaction
}

// ErrNewerSchema is why Open refuses a database that a newer hvkube
// migrated past the versions this binary knows.
var ErrNewerSchema = errors.New("database schema is newer than this hvkube")

// DBFile is the database's file name inside the data directory.
const DBFile = "hvkube.db"

// Open opens (creating if needed) the store in dir and applies migrations.
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(dir, DBFile)
	if err := checkWritable(dir, path); err != nil {
		return nil, err
	}
	// Pragmas go in the DSN so that every pooled connection gets them.
	dsn := "file:" + filepath.ToSlash(path) +
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)" +
		"&_pragma=synchronous(NORMAL)&_txlock=immediate"
	w, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	r, err := sql.Open("sqlite", dsn+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	r.SetMaxOpenConns(8)
	r.SetMaxIdleConns(8)
	s := &Store{w: w, r: r, wstmts: newStmtCache(w), rstmts: newStmtCache(r), path: path, now: opts.Now, log: opts.Logger, maxEvents: opts.MaxEvents, maxChanges: opts.MaxChanges, watchBuffer: opts.WatchBuffer, watchers: map[*watcher]struct{}{}}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.maxEvents == 0 {
		s.maxEvents = 50000
	}
	if s.maxChanges == 0 {
		s.maxChanges = 100000
	}
	if s.watchBuffer <= 0 {
		s.watchBuffer = WatchBuffer
	}
	s.events, s.eventsDone = make(chan eventRecord, 10000), make(chan struct{})
	go s.writeEvents()
	s.writes, s.writesDone = make(chan *writeReq, writeQueue), make(chan struct{})
	go s.commitWrites()
	if err := s.migrate(ctx); err != nil {
		s.Close()
		if c := sqliteCode(err); c != 0 {
			return nil, writeProbeError(path, err)
		}
		return nil, err
	}
	// A database that SQLite opened but cannot write (a read-only file
	// system) passes the migrations when none is due.
	if _, err := s.w.ExecContext(ctx, `UPDATE revision SET rv = rv WHERE id = 1`); err != nil {
		s.Close()
		return nil, writeProbeError(path, err)
	}
	if err := errors.Join(s.wstmts.prepare(ctx, writerStatements), s.rstmts.prepare(ctx, readerStatements)); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close commits the writes and events still queued, stops every watcher
// and closes the database. It is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	// No new write queues; once those already queuing are in, the
	// committer commits the rest and stops.
	s.writers.Wait()
	close(s.writes)
	<-s.writesDone
	// RecordEvent no longer queues (it saw closed under mu, or queued
	// before), and no new flushEvents starts; once those already started
	// have queued their marker (the writer keeps draining meanwhile), the
	// queue can be closed and drained.
	s.flushers.Wait()
	close(s.events)
	<-s.eventsDone
	s.mu.Lock()
	for w := range s.watchers {
		w.stop(nil)
	}
	s.watchers = nil
	s.mu.Unlock()
	s.wstmts.close()
	s.rstmts.close()
	return errors.Join(s.r.Close(), s.w.Close())
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	return s.r.QueryRowContext(ctx, "SELECT 1").Scan(&one)
}

func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("migrations table: %w", err)
	}
	entries, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(entries)
	versions := make([]int, len(entries))
	for i, e := range entries {
		num, _, _ := strings.Cut(filepath.Base(e), "_")
		if versions[i], err = strconv.Atoi(num); err != nil {
			return fmt.Errorf("migration %s: bad name", filepath.Base(e))
		}
	}
	// A database a newer hvkube migrated has tables and rows this binary
	// does not know: writing to it could lose what they hold.
	var have int
	if err := s.w.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("schema version: %w", err)
	}
	if known := slices.Max(versions); have > known {
		return fmt.Errorf("store: the database %s is at schema version %d, but this hvkube knows versions up to %d: a newer hvkube wrote it (run that version, or choose another --data-dir): %w",
			s.path, have, known, ErrNewerSchema)
	}
	for i, e := range entries {
		version := versions[i]
		var n int
		if err := s.w.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, version).Scan(&n); err != nil {
			return fmt.Errorf("migration %d: %w", version, err)
		}
		if n > 0 {
			continue
		}
		body, err := migrations.ReadFile(e)
		if err != nil {
			return err
		}
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migration %d: %w", version, err)
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", version, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, version, s.now().UTC().Format(time.RFC3339)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", version, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %d: %w", version, err)
		}
		s.log.Debug("applied store migration", "version", version)
	}
	return nil
}

// Tx is a write transaction. Its methods must only be called from the
// function passed to Store.Tx, and must not do slow work (no VM calls): the
// transaction holds SQLite's one write lock.
type Tx struct {
	s       *Store
	tx      *sql.Tx
	q       preparedQ // tx, with the writer's prepared statements
	ctx     context.Context
	pending []WatchEvent
	events  int
	changes int
	// rv is the last resourceVersion the transaction gave out, 0 before
	// the first; the revision row is written once, before the commit.
	rv int64
}

// Tx runs fn in one write transaction: every change fn makes commits
// together or not at all. Watchers hear of the changes after the commit.
func (s *Store) Tx(ctx context.Context, fn func(tx *Tx) error) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	sqlTx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return s.classify(fmt.Errorf("begin: %w", err))
	}
	tx := &Tx{s: s, tx: sqlTx, q: preparedQ{s.wstmts, sqlTx}, ctx: ctx}
	if err := fn(tx); err != nil {
		sqlTx.Rollback()
		return s.classify(err)
	}
	if tx.rv != 0 {
		if _, err := tx.q.ExecContext(ctx, sqlSetRV, tx.rv); err != nil {
			sqlTx.Rollback()
			return s.classify(fmt.Errorf("write revision: %w", err))
		}
	}
	if err := sqlTx.Commit(); err != nil {
		sqlTx.Rollback()
		// Whether any of it landed is not known: read the store again.
		s.latest = nil
		return s.classify(fmt.Errorf("commit: %w", err))
	}
	s.remember(tx.pending)
	s.publish(tx.pending)
	if tx.events > 0 || tx.changes > 0 {
		s.maybePrune(ctx, tx.events, tx.changes)
	}
	return nil
}

// nextRV gives out the transaction's next resourceVersion: the first
// reads the revision row, the others count on from it (a write rolled
// back to its savepoint gives its numbers back).
func (tx *Tx) nextRV() (int64, error) {
	if tx.rv == 0 {
		if err := tx.q.QueryRowContext(tx.ctx, sqlGetRV).Scan(&tx.rv); err != nil {
			return 0, fmt.Errorf("next revision: %w", err)
		}
	}
	tx.rv++
	return tx.rv, nil
}

// Get reads one object inside the transaction.
func (tx *Tx) Get(kind, name string) (api.Object, error) {
	return tx.current(kind, name)
}

// objKey names an object of Store.latest.
type objKey struct{ kind, name string }

// maxLatest bounds Store.latest; past it, it starts again empty.
const maxLatest = 100000

// current is the object as the transaction sees it, a copy of its own:
// its latest write in the transaction, else as last committed (from
// Store.latest, or read from the database and kept there).
func (tx *Tx) current(kind, name string) (api.Object, error) {
	for i := len(tx.pending) - 1; i >= 0; i-- {
		ev := tx.pending[i]
		if ev.Object.GetMeta().Name != name || ev.Object.GetTypeMeta().Kind != kind {
			continue
		}
		if ev.Type == Deleted {
			return nil, fmt.Errorf("%s %q %w", strings.ToLower(kind), name, api.ErrNotFound)
		}
		return api.DeepCopy(ev.Object), nil
	}
	if o, ok := tx.s.latest[objKey{kind, name}]; ok {
		return api.DeepCopy(o), nil
	}
	o, err := getObject(tx.ctx, tx.q, kind, name)
	if err != nil {
		return nil, err
	}
	tx.s.keep(objKey{kind, name}, api.DeepCopy(o))
	return o, nil
}

// keep puts o, as committed, in Store.latest. Callers hold writeMu.
func (s *Store) keep(k objKey, o api.Object) {
	if s.latest == nil || len(s.latest) >= maxLatest {
		s.latest = make(map[objKey]api.Object)
	}
	s.latest[k] = o
}

// remember brings Store.latest up to the committed changes evs. Callers
// hold writeMu.
func (s *Store) remember(evs []WatchEvent) {
	for _, ev := range evs {
		kind := ev.Object.GetTypeMeta().Kind
		if kind == api.KindEvent {
			continue
		}
		k := objKey{kind, ev.Object.GetMeta().Name}
		if ev.Type == Deleted {
			delete(s.latest, k)
			continue
		}
		// A copy: the watchers share ev.Object.
		s.keep(k, api.DeepCopy(ev.Object))
	}
}

// List reads the objects of a kind matching sel inside the transaction.
func (tx *Tx) List(kind string, sel api.Selector) ([]api.Object, error) {
	objs, _, err := listObjects(tx.ctx, tx.q, kind, sel)
	return objs, err
}

// Create stores a new object. It sets uid, resourceVersion, generation 1 and
// creationTimestamp; the object's status is kept as given (controllers create
// objects with a status). ErrAlreadyExists if the name is taken.
func (tx *Tx) Create(o api.Object) (api.Object, error) {
	o = api.DeepCopy(o)
	kind := o.GetTypeMeta().Kind
	m := o.GetMeta()
	if _, err := tx.current(kind, m.Name); err == nil {
		return nil, fmt.Errorf("%s %q %w", strings.ToLower(kind), m.Name, api.ErrAlreadyExists)
	} else if !errors.Is(err, api.ErrNotFound) {
		return nil, err
	}
	rv, err := tx.nextRV()
	if err != nil {
		return nil, err
	}
	o.GetTypeMeta().APIVersion = api.Version
	m.UID = uuid.NewString()
	m.ResourceVersion = strconv.FormatInt(rv, 10)
	m.Generation = 1
	m.CreationTimestamp = tx.s.now().UTC()
	m.DeletionTimestamp = nil
	if err := tx.put(o, rv, Added, nil); err != nil {
		return nil, err
	}
	return api.DeepCopy(o), nil
}

// Update writes o's metadata (labels, annotations, finalizers, owners) and
// spec over the stored object, keeping its status. If o carries a
// resourceVersion it must match the stored one (ErrConflict otherwise). A
// spec change increments generation. An update that changes nothing writes
// nothing and returns the stored object with changed=false. An object being
// deleted whose last finalizer is removed is deleted.
func (tx *Tx) Update(o api.Object) (out api.Object, changed bool, err error) {
	kind, m := o.GetTypeMeta().Kind, o.GetMeta()
	cur, err := tx.current(kind, m.Name)
	if err != nil {
		return nil, false, err
	}
	next, specChanged, changed, err := Merge(cur, o)
	if err != nil {
		return nil, false, err
	}
	if !changed {
		return cur, false, nil
	}
	nm := next.GetMeta()
	if specChanged {
		nm.Generation++
	}
	if nm.DeletionTimestamp != nil && len(nm.Finalizers) == 0 {
		if err := tx.remove(next); err != nil {
			return nil, false, err
		}
		return next, true, nil
	}
	return tx.write(next, cur.GetMeta().Labels)
}

// UpdateStatus replaces the stored object's status with o's. The
// resourceVersion precondition applies as in Update. Nothing else changes.
func (tx *Tx) UpdateStatus(o api.Object) (api.Object, error) {
	kind, m := o.GetTypeMeta().Kind, o.GetMeta()
	cur, err := tx.current(kind, m.Name)
	if err != nil {
		return nil, err
	}
	if err := checkPrecondition(cur, m.ResourceVersion); err != nil {
		return nil, err
	}
	if jsonEqual(cur.GetStatus(), o.GetStatus()) {
		return cur, nil
	}
	next := api.DeepCopy(cur)
	api.CopyStatus(next, o)
	out, _, err := tx.write(next, cur.GetMeta().Labels)
	return out, err
}

// PatchStatus merges patch, a JSON merge patch (RFC 7386) of the status,
// into the stored object's status, conditioned on resourceVersion rv when
// it is set. An invalid patch is ErrInvalid.
func (tx *Tx) PatchStatus(kind, name, rv string, patch []byte) (api.Object, error) {
	cur, err := tx.current(kind, name)
	if err != nil {
		return nil, err
	}
	if err := checkPrecondition(cur, rv); err != nil {
		return nil, err
	}
	next, err := MergeStatus(cur, patch)
	if err != nil {
		return nil, err
	}
	if jsonEqual(cur.GetStatus(), next.GetStatus()) {
		return cur, nil
	}
	out, _, err := tx.write(next, cur.GetMeta().Labels)
	return out, err
}

// MergeStatus returns a copy of o with the JSON merge patch patch (RFC
// 7386) applied to its status. An invalid patch is ErrInvalid.
func MergeStatus(o api.Object, patch []byte) (api.Object, error) {
	kind, name := o.GetTypeMeta().Kind, o.GetMeta().Name
	base, err := json.Marshal(o.GetStatus())
	if err != nil {
		return nil, err
	}
	merged, err := jsonpatch.MergePatch(base, patch)
	if err != nil {
		return nil, fmt.Errorf("status patch of %s %s: %v: %w", kind, name, err, api.ErrInvalid)
	}
	// The status as merged, whole: a field the patch removed is gone.
	st, err := api.New(kind)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(merged, st.GetStatus()); err != nil {
		return nil, fmt.Errorf("status patch of %s %s: %v: %w", kind, name, err, api.ErrInvalid)
	}
	next := api.DeepCopy(o)
	api.CopyStatus(next, st)
	return next, nil
}

// DeleteOptions are preconditions for Delete.
type DeleteOptions struct {
	// ResourceVersion, when set, must match the stored object.
	ResourceVersion string
}

// Delete removes the object. If it has finalizers it is only marked
// (deletionTimestamp) and stays until they are removed; deleted then reports
// false. ErrNotFound if there is no such object.
func (tx *Tx) Delete(kind, name string, opts DeleteOptions) (obj api.Object, deleted bool, err error) {
	cur, err := tx.current(kind, name)
	if err != nil {
		return nil, false, err
	}
	if err := checkPrecondition(cur, opts.ResourceVersion); err != nil {
		return nil, false, err
	}
	if len(cur.GetMeta().Finalizers) > 0 {
		if cur.GetMeta().DeletionTimestamp != nil {
			return cur, false, nil
		}
		next := api.DeepCopy(cur)
		t := tx.s.now().UTC()
		next.GetMeta().DeletionTimestamp = &t
		out, _, err := tx.write(next, cur.GetMeta().Labels)
		return out, false, err
	}
	if err := tx.remove(cur); err != nil {
		return nil, false, err
	}
	return cur, true, nil
}

// write stores o over its earlier version, whose labels were prevLabels.
func (tx *Tx) write(o api.Object, prevLabels map[string]string) (api.Object, bool, error) {
	rv, err := tx.nextRV()
	if err != nil {
		return nil, false, err
	}
	o.GetMeta().ResourceVersion = strconv.FormatInt(rv, 10)
	if err := tx.put(o, rv, Modified, prevLabels); err != nil {
		return nil, false, err
	}
	return api.DeepCopy(o), true, nil
}

func (tx *Tx) remove(o api.Object) error {
	rv, err := tx.nextRV()
	if err != nil {
		return err
	}
	m := o.GetMeta()
	if _, err := tx.q.ExecContext(tx.ctx, sqlDeleteObject, o.GetTypeMeta().Kind, m.Name); err != nil {
		return fmt.Errorf("delete %s: %w", m.Name, err)
	}
	m.ResourceVersion = strconv.FormatInt(rv, 10)
	data, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	return tx.logChange(WatchEvent{Type: Deleted, Object: o}, rv, data)
}

// put writes o at revision rv: inserted for Added, else over the stored
// row; the change goes to the change log and, after the commit, to the
// watchers.
func (tx *Tx) put(o api.Object, rv int64, typ string, prevLabels map[string]string) error {
	data, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	m := o.GetMeta()
	kind := o.GetTypeMeta().Kind
	labels := []byte("{}")
	if len(m.Labels) > 0 {
		labels, _ = json.Marshal(m.Labels)
	}
	if typ == Added {
		_, err = tx.q.ExecContext(tx.ctx, sqlInsertObject, kind, m.Name, m.UID, rv, data, labels)
	} else {
		_, err = tx.q.ExecContext(tx.ctx, sqlUpdateObject, rv, data, labels, kind, m.Name)
	}
	if err != nil {
		return fmt.Errorf("write %s %s: %w", kind, m.Name, err)
	}
	return tx.logChange(WatchEvent{Type: typ, Object: o, prevLabels: prevLabels}, rv, data)
}

// logChange appends ev, written at rv as data, to the change log.
func (tx *Tx) logChange(ev WatchEvent, rv int64, data []byte) error {
	var prev any
	if ev.prevLabels != nil {
		b, _ := json.Marshal(ev.prevLabels)
		prev = string(b)
	}
	m := ev.Object.GetMeta()
	if _, err := tx.q.ExecContext(tx.ctx, sqlLogChange,
		rv, ev.Object.GetTypeMeta().Kind, m.Name, ev.Type, data, prev); err != nil {
		return fmt.Errorf("log change of %s: %w", m.Name, err)
	}
	tx.pending = append(tx.pending, ev)
	tx.changes++
	return nil
}

// Emit records an event in the audit log, committed with the transaction.
func (tx *Tx) Emit(o api.Object, eventType, reason, message string) error {
	ev := &api.Event{
		TypeMeta:       api.TypeMeta{APIVersion: api.Version, Kind: api.KindEvent},
		InvolvedObject: api.ObjectReference{Kind: o.GetTypeMeta().Kind, Name: o.GetMeta().Name, UID: o.GetMeta().UID},
		Type:           eventType,
		Reason:         reason,
		Message:        message,
		Timestamp:      tx.s.now().UTC(),
	}
	res, err := tx.q.ExecContext(tx.ctx, sqlInsertEvent,
		ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.InvolvedObject.UID, eventType, reason, message, ev.Timestamp.Format(time.RFC3339Nano))
	if err != nil {
		return fmt.Errorf("record event: %w", err)
	}
	id, _ := res.LastInsertId()
	fillEventMeta(ev, id)
	tx.events++
	tx.pending = append(tx.pending, WatchEvent{Type: Added, Object: ev})
	return nil
}

func fillEventMeta(ev *api.Event, id int64) {
	ev.Metadata = api.ObjectMeta{
		Name:              fmt.Sprintf("%s.%d", ev.InvolvedObject.Name, id),
		ResourceVersion:   strconv.FormatInt(id, 10),
		CreationTimestamp: ev.Timestamp,
	}
}

// maybePrune bounds the audit log (MaxEvents) and the change log
// (MaxChanges), every thousand additions.
func (s *Store) maybePrune(ctx context.Context, events, changes int) {
	s.mu.Lock()
	s.inserted += events
	s.logged += changes
	pruneEvents, pruneChanges := s.inserted >= 1000, s.logged >= 1000
	if pruneEvents {
		s.inserted = 0
	}
	if pruneChanges {
		s.logged = 0
	}
	s.mu.Unlock()
	if pruneEvents {
		if _, err := s.w.ExecContext(ctx, `DELETE FROM events WHERE id <= (SELECT MAX(id) FROM events) - ?`, s.maxEvents); err != nil {
			s.log.Warn("prune events", "err", err)
		}
	}
	if pruneChanges {
		if err := s.compact(ctx); err != nil {
			s.log.Warn("compact the change log", "err", err)
		}
	}
}

// compact drops the changes older than the newest MaxChanges revisions
// and records the revision up to which they are gone, so that a watch
// from before it is refused rather than silently missing changes. Every
// revision is one logged change (a write logs its change at the revision
// it takes, and a write rolled back gives its revision back), so the cut
// is the current revision less MaxChanges: found without walking the log,
// whose rows hold whole objects. The caller holds writeMu (it runs at the
// end of Tx).
func (s *Store) compact(ctx context.Context) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var cut, compacted int64
	err = tx.QueryRowContext(ctx, `SELECT rv - ?, compacted_rv FROM revision WHERE id = 1`, s.maxChanges).Scan(&cut, &compacted)
	if err != nil || cut <= compacted {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM changes WHERE rv <= ?`, cut); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE revision SET compacted_rv = MAX(compacted_rv, ?) WHERE id = 1`, cut); err != nil {
		return err
	}
	return tx.Commit()
}

func checkPrecondition(cur api.Object, rv string) error {
	if rv != "" && rv != cur.GetMeta().ResourceVersion {
		return fmt.Errorf("%s %q was modified (resourceVersion %s, yours %s): re-read and try again: %w",
			strings.ToLower(cur.GetTypeMeta().Kind), cur.GetMeta().Name, cur.GetMeta().ResourceVersion, rv, api.ErrConflict)
	}
	return nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func getObject(ctx context.Context, q querier, kind, name string) (api.Object, error) {
	var data []byte
	err := q.QueryRowContext(ctx, sqlGetObject, kind, name).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%s %q %w", strings.ToLower(kind), name, api.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s %s: %w", kind, name, err)
	}
	return decodeRow(kind, data)
}

func listObjects(ctx context.Context, q querier, kind string, sel api.Selector) ([]api.Object, int64, error) {
	raws, rv, _, err := listRaw(ctx, q, kind, Page{Selector: sel})
	if err != nil {
		return nil, 0, err
	}
	out := make([]api.Object, 0, len(raws))
	for _, data := range raws {
		o, err := decodeRow(kind, data)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, o)
	}
	return out, rv, nil
}

// Page selects part of a list: the objects matching Selector, by name,
// after the name After, at most Limit of them (0: all).
type Page struct {
	Selector api.Selector
	After    string
	Limit    int
	// NotOlderThan, when set, is a resourceVersion the client saw: the
	// page must be read at it or later. One the store never gave out is
	// invalid; one newer than the store is gone.
	NotOlderThan string
}

// listRaw returns the stored JSON of the matching objects without decoding
// them; labels are read from their own column to filter. next is the name
// the next page starts after, or "" when there is no more.
func listRaw(ctx context.Context, q querier, kind string, pg Page) (items []json.RawMessage, rv int64, next string, err error) {
	if err := q.QueryRowContext(ctx, sqlGetRV).Scan(&rv); err != nil {
		return nil, 0, "", fmt.Errorf("list %s: %w", kind, err)
	}
	if pg.NotOlderThan != "" {
		min, err := parseRV("resourceVersion", pg.NotOlderThan)
		if err != nil {
			return nil, 0, "", err
		}
		if min > rv {
			return nil, 0, "", fmt.Errorf("resourceVersion %d is newer than the store's (%d): %w", min, rv, api.ErrGone)
		}
	}
	sel := pg.Selector
	query := `SELECT name, data, labels FROM objects WHERE kind = ?`
	args := []any{kind}
	if pg.After != "" {
		query += ` AND name > ?`
		args = append(args, pg.After)
	}
	// Label keys are restricted to [A-Za-z0-9._/-], so quoting them in a
	// JSON path is safe; the values are bound parameters.
	for k, v := range sel.Equalities() {
		query += ` AND json_extract(labels, '$."` + k + `"') = ?`
		args = append(args, v)
	}
	rows, err := q.QueryContext(ctx, query+` ORDER BY name`, args...)
	if err != nil {
		return nil, 0, "", fmt.Errorf("list %s: %w", kind, err)
	}
	defer rows.Close()
	items = []json.RawMessage{}
	last := ""
	for rows.Next() {
		var name string
		var data, labelJSON []byte
		if err := rows.Scan(&name, &data, &labelJSON); err != nil {
			return nil, 0, "", fmt.Errorf("list %s: %w", kind, err)
		}
		if !sel.Empty() {
			var labels map[string]string
			if err := json.Unmarshal(labelJSON, &labels); err != nil {
				return nil, 0, "", fmt.Errorf("list %s: labels: %w", kind, err)
			}
			if !sel.Matches(labels) {
				continue
			}
		}
		if pg.Limit > 0 && len(items) == pg.Limit {
			next = last // one more matches: there is another page
			break
		}
		items = append(items, data)
		last = name
	}
	if err := rows.Err(); err != nil {
		return nil, 0, "", fmt.Errorf("list %s: %w", kind, err)
	}
	return items, rv, next, nil
}

func decodeRow(kind string, data []byte) (api.Object, error) {
	o, err := api.New(kind)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, o); err != nil {
		return nil, fmt.Errorf("decode stored %s: %w", kind, err)
	}
	return o, nil
}

func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// Interface is what controllers use of a store: objects by kind and name,
// optimistic concurrency on resourceVersion (Update and UpdateStatus with a
// resourceVersion set are conditional), watches that resume from a
// resourceVersion, and the audit log. *Store implements it over SQLite;
// the kube package implements it over a Kubernetes API server, and
// storetest checks both the same way.
//
// resourceVersions are opaque: a caller passes one back (to a conditional
// write or to WatchFrom) and compares two for equality, never for order.
// Names are unique per kind: a store is one namespace (SQLite has one; the
// Kubernetes store is given one), so that hvkube's names, URLs and the CLI
// are the same in both modes and one cluster can hold several installs.
// Transactions are not part of it: a controller changes one object at a
// time and claims by resourceVersion.
type Interface interface {
	Get(ctx context.Context, kind, name string) (api.Object, error)
	List(ctx context.Context, kind string, sel api.Selector) ([]api.Object, string, error)
	Create(ctx context.Context, o api.Object) (api.Object, error)
	Update(ctx context.Context, o api.Object) (api.Object, bool, error)
	UpdateStatus(ctx context.Context, o api.Object) (api.Object, error)
	// PatchStatus merges a JSON merge patch of the status (RFC 7386) into
	// the stored object's, conditioned on resourceVersion rv when it is
	// set: a status write by a writer that knows what it changes and the
	// version it acts on, but not the object (it reads nothing first).
	PatchStatus(ctx context.Context, kind, name, rv string, patch []byte) (api.Object, error)
	Delete(ctx context.Context, kind, name string, opts DeleteOptions) (api.Object, bool, error)
	ListAndWatch(ctx context.Context, kind string, sel api.Selector) ([]api.Object, Watcher, error)
	WatchFrom(ctx context.Context, kind string, sel api.Selector, rv string) (Watcher, error)
	RecordEvent(ctx context.Context, o api.Object, eventType, reason, message string) error
}

var _ Interface = (*Store)(nil)
