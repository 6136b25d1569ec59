package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
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
	s.writeMu.Lock()
	s.events <- rec
	for len(s.events) > 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
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
	time.Sleep(50 * time.Millisecond) // ListEvents waits for room in the queue
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
	s.writeMu.Lock()
	for len(s.events) < cap(s.events) {
		s.events <- rec
	}
	listed := make(chan struct{})
	go func() {
		s.ListEvents(ctx, EventFilter{Limit: 1})
		close(listed)
	}()
	time.Sleep(20 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	time.Sleep(20 * time.Millisecond)
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
