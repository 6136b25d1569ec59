package store

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
)

// The store's statements of constant text that run on every write or
// read of one object; Open prepares them once.
const (
	sqlGetObject    = `SELECT data FROM objects WHERE kind = ? AND name = ?`
	sqlGetRV        = `SELECT rv FROM revision WHERE id = 1`
	sqlSetRV        = `UPDATE revision SET rv = ? WHERE id = 1`
	sqlInsertObject = `INSERT INTO objects (kind, name, uid, rv, data, labels) VALUES (?, ?, ?, ?, ?, ?)`
	sqlUpdateObject = `UPDATE objects SET rv = ?, data = ?, labels = ? WHERE kind = ? AND name = ?`
	sqlDeleteObject = `DELETE FROM objects WHERE kind = ? AND name = ?`
	sqlLogChange    = `INSERT INTO changes (rv, kind, name, type, data, prev_labels) VALUES (?, ?, ?, ?, ?, ?)`
	sqlInsertEvent  = `INSERT INTO events (kind, name, uid, type, reason, message, ts) VALUES (?, ?, ?, ?, ?, ?, ?)`
	sqlSavepoint    = `SAVEPOINT w`
	sqlRollbackTo   = `ROLLBACK TO w`
	sqlRelease      = `RELEASE w`
)

// writerStatements are prepared on the writer, readerStatements on the
// readers.
var (
	writerStatements = []string{sqlGetObject, sqlGetRV, sqlSetRV, sqlInsertObject, sqlUpdateObject, sqlDeleteObject, sqlLogChange, sqlInsertEvent, sqlSavepoint, sqlRollbackTo, sqlRelease}
	readerStatements = []string{sqlGetObject, sqlGetRV}
)

// stmtCache holds one database's prepared statements by their text, so
// that SQLite parses and plans each of them once instead of at every run
// (parsing was about a tenth of the server's CPU under a stream of
// claims). They are prepared when the store opens, not on first use: the
// writer has one connection, which a transaction holds while it runs, so
// a statement prepared from inside one would wait for itself.
type stmtCache struct {
	db *sql.DB
	mu sync.RWMutex // guards m
	m  map[string]*sql.Stmt
}

func newStmtCache(db *sql.DB) *stmtCache { return &stmtCache{db: db} }

// prepare prepares queries; it runs before the store's first transaction.
func (c *stmtCache) prepare(ctx context.Context, queries []string) error {
	m := make(map[string]*sql.Stmt, len(queries))
	for _, q := range queries {
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			for _, st := range m {
				st.Close()
			}
			return fmt.Errorf("prepare %q: %w", q, err)
		}
		m[q] = st
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = m
	return nil
}

// get returns query prepared, or nil when it was not (the caller runs
// the text).
func (c *stmtCache) get(query string) *sql.Stmt {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.m[query]
}

// close closes the statements; get finds none after.
func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		st.Close()
	}
	c.m = nil
}

// preparedQ runs statements through a stmtCache: on the database itself,
// or in a transaction on it when tx is set. A text the cache does not
// hold runs unprepared.
type preparedQ struct {
	c  *stmtCache
	tx *sql.Tx
}

func (q preparedQ) stmt(ctx context.Context, query string) *sql.Stmt {
	st := q.c.get(query)
	if st != nil && q.tx != nil {
		st = q.tx.StmtContext(ctx, st)
	}
	return st
}

// QueryRowContext runs a query of one row.
func (q preparedQ) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := q.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	if q.tx != nil {
		return q.tx.QueryRowContext(ctx, query, args...)
	}
	return q.c.db.QueryRowContext(ctx, query, args...)
}

// QueryContext runs a query of many rows, unprepared: its text may be
// made of what a caller chose (a selector's label keys).
func (q preparedQ) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if q.tx != nil {
		return q.tx.QueryContext(ctx, query, args...)
	}
	return q.c.db.QueryContext(ctx, query, args...)
}

// ExecContext runs a statement that returns no rows.
func (q preparedQ) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := q.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	if q.tx != nil {
		return q.tx.ExecContext(ctx, query, args...)
	}
	return q.c.db.ExecContext(ctx, query, args...)
}
