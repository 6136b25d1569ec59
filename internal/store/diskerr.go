package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hvkube/hvkube/internal/api"
)

// SQLite's primary result codes that say something about the disk
// (sqlite3.h); extended codes carry them in their low byte.
const (
	sqliteReadOnly = 8
	sqliteIOErr    = 10
	sqliteCantOpen = 14
	sqliteFull     = 13
)

// sqliteCode returns the primary SQLite result code in err, or 0.
func sqliteCode(err error) int {
	var c interface{ Code() int }
	if errors.As(err, &c) {
		return c.Code() & 0xff
	}
	return 0
}

// classify turns a full disk into api.ErrNoSpace, naming the database, so
// that the API answers 507 and says what to do. Nothing was written: the
// transaction rolled back, and writes work again once there is space.
func (s *Store) classify(err error) error {
	if err == nil || sqliteCode(err) != sqliteFull {
		return err
	}
	return fmt.Errorf("the disk holding the database %s is full; nothing was written (free some space and try again): %w: %w", s.path, api.ErrNoSpace, err)
}

// checkWritable makes sure the database file and its directory can be
// written (SQLite keeps its -wal and -shm files beside the database), and
// names the file and the cause when they cannot: otherwise SQLite opens a
// read-only database without a word and the first write fails far from
// here.
func checkWritable(dir, path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("store: cannot write the database %s: %w (make it writable by this user, or choose another --data-dir)", path, causeOf(err))
	}
	f.Close()
	probe, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("store: cannot create files in %s, where the database keeps its journal: %w (make the directory writable by this user, or choose another --data-dir)", dir, causeOf(err))
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}

// causeOf strips the path an *os.PathError repeats.
func causeOf(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// writeProbeError explains why SQLite could not write the opened database.
func writeProbeError(path string, err error) error {
	switch sqliteCode(err) {
	case sqliteReadOnly, sqliteIOErr, sqliteCantOpen:
		return fmt.Errorf("store: cannot write the database %s: %w (is the file or its file system read-only? choose another --data-dir)", filepath.Clean(path), err)
	case sqliteFull:
		return fmt.Errorf("store: the disk holding the database %s is full: %w: %w", path, api.ErrNoSpace, err)
	}
	return fmt.Errorf("store: write to %s: %w", path, err)
}
