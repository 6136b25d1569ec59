package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hvkube/hvkube/internal/api"
)

// TestFullEventQueueDoesNotStallWrites: a ListEvents that waits for room
// in a full event queue holds up nothing but itself. The event writer
// goes on taking batches, and an object write goes through while the
// reader still waits.
func TestFullEventQueueDoesNotStallWrites(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	p := pool("p", 1)
	rec := eventRecord{obj: p, typ: api.EventNormal, reason: "Queued", message: "queued"}

	// Hold the writer at the write lock with one record while the queue
	// fills up behind it.
	batches, waits := hookEvents(t)
	s.writeMu.Lock()
	s.events <- rec
	<-batches // the writer took it, and waits for the lock
	for len(s.events) < cap(s.events) {
		s.events <- rec
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	listed := make(chan error, 1)
	go func() {
		_, err := s.ListEvents(lctx, EventFilter{Limit: 1})
		listed <- err
	}()
	<-waits // ListEvents waits for room in the queue
	s.writeMu.Unlock()

	created := make(chan error, 1)
	go func() {
		_, err := s.Create(ctx, pool("q", 1))
		created <- err
	}()
	select {
	case err := <-created:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		cancel() // what the reader's deadline did
		<-created
		t.Fatal("Create waited for a ListEvents blocked on the full event queue")
	}
	select {
	case err := <-listed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ListEvents did not return once the writer drained the queue")
	}
}

// TestCloseWaitsForFlush: Close with a ListEvents waiting on a full queue
// neither panics (a send on the closed queue) nor hangs.
func TestCloseWaitsForFlush(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	p := pool("p", 1)
	rec := eventRecord{obj: p, typ: api.EventNormal, reason: "Queued", message: "queued"}
	batches, waits := hookEvents(t)
	s.writeMu.Lock()
	s.events <- rec
	<-batches // the writer took it, and waits for the lock
	for len(s.events) < cap(s.events) {
		s.events <- rec
	}
	listed := make(chan struct{})
	go func() {
		s.ListEvents(ctx, EventFilter{Limit: 1})
		close(listed)
	}()
	<-waits
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// Close marks the store closed, then waits for the waiting readers.
	for !s.isClosed() {
		runtime.Gosched()
	}
	s.writeMu.Unlock()
	select {
	case <-listed:
	case <-time.After(30 * time.Second):
		t.Fatal("ListEvents hung across Close")
	}
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close hung")
	}
}

// TestOpenRefusesNewerSchema: a database that a newer hvkube migrated is
// refused, with the file, its version and this binary's in the message,
// and left as it was.
func TestOpenRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	path := filepath.Join(dir, DBFile)
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, applied_at) VALUES (9999, '2030-01-01T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	var known int
	if err := db.QueryRow(`SELECT MAX(version) FROM schema_migrations WHERE version < 9999`).Scan(&known); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err = Open(ctx, dir, Options{})
	if err == nil {
		s.Close()
		t.Fatal("a database from a newer hvkube was opened")
	}
	if !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("got %v, want ErrNewerSchema", err)
	}
	for _, want := range []string{path, "version 9999", "up to " + strconv.Itoa(known)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}
}

// hookEvents sets the event writer's test hooks for the test: batches
// hears of each batch the writer takes, waits of each reader that waits
// for the queue.
func hookEvents(t *testing.T) (batches, waits <-chan struct{}) {
	b, w := make(chan struct{}, 1000), make(chan struct{}, 1000)
	testHookEventBatch = func() { b <- struct{}{} }
	testHookFlushWaits = func() { w <- struct{}{} }
	t.Cleanup(func() { testHookEventBatch, testHookFlushWaits = nil, nil })
	return b, w
}

// isClosed reports whether Close has begun.
func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// TestMigrateObjectsToRowid: a store of schema version 3, whose objects
// table had no rowids, opens with its objects, their resourceVersions
// and labels as they were, and takes writes after.
func TestMigrateObjectsToRowid(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var want []api.Object
	for i := range 5 {
		o, err := s.Create(ctx, pool(fmt.Sprintf("p%d", i), i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, o)
	}
	s.Close()
	// The table as versions 1 to 3 made it, the rows copied back.
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(filepath.Join(dir, DBFile)))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE objects_old (kind TEXT NOT NULL, name TEXT NOT NULL, uid TEXT NOT NULL UNIQUE, rv INTEGER NOT NULL, data BLOB NOT NULL, labels TEXT NOT NULL DEFAULT '{}', PRIMARY KEY (kind, name)) WITHOUT ROWID`,
		`INSERT INTO objects_old SELECT kind, name, uid, rv, data, labels FROM objects`,
		`DROP TABLE objects`,
		`ALTER TABLE objects_old RENAME TO objects`,
		`DELETE FROM schema_migrations WHERE version >= 4`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s, err = Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ddl string
	if err := s.r.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'objects'`).Scan(&ddl); err != nil || strings.Contains(ddl, "WITHOUT ROWID") {
		t.Fatalf("the objects table after the migration: %q, %v", ddl, err)
	}
	got, _, err := s.List(ctx, api.KindSandboxPool, api.SelectorFromMap(map[string]string{"team": "qa"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("listed %d pools after the migration, want %d", len(got), len(want))
	}
	for i, o := range got {
		w := want[i].(*api.SandboxPool)
		p := o.(*api.SandboxPool)
		if p.Metadata.Name != w.Metadata.Name || p.Metadata.UID != w.Metadata.UID || p.Metadata.ResourceVersion != w.Metadata.ResourceVersion || p.Spec.Replicas != w.Spec.Replicas {
			t.Errorf("pool %d: %s uid %s rv %s replicas %d, want %s %s %s %d", i, p.Metadata.Name, p.Metadata.UID, p.Metadata.ResourceVersion, p.Spec.Replicas,
				w.Metadata.Name, w.Metadata.UID, w.Metadata.ResourceVersion, w.Spec.Replicas)
		}
	}
	p := got[2].(*api.SandboxPool)
	p.Status.Ready = 2
	if _, err := s.UpdateStatus(ctx, p); err != nil {
		t.Fatalf("a write after the migration: %v", err)
	}
	if _, err := s.Create(ctx, pool("p0", 1)); !errors.Is(err, api.ErrAlreadyExists) {
		t.Errorf("a second p0 after the migration: %v, want ErrAlreadyExists", err)
	}
}
