-- Objects of every kind, stored as their full JSON. kind+name is the key the
-- API addresses; rv is the global revision of the object's last write.
CREATE TABLE objects (
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    uid  TEXT NOT NULL UNIQUE,
    rv   INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (kind, name)
) WITHOUT ROWID;

-- One row: the last revision handed out. Every write takes the next one.
CREATE TABLE revision (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    rv INTEGER NOT NULL
);
INSERT INTO revision (id, rv) VALUES (1, 0);

-- The audit log.
CREATE TABLE events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    kind    TEXT NOT NULL,
    name    TEXT NOT NULL,
    uid     TEXT NOT NULL DEFAULT '',
    type    TEXT NOT NULL,
    reason  TEXT NOT NULL,
    message TEXT NOT NULL,
    ts      TEXT NOT NULL
);
CREATE INDEX events_object ON events (kind, name);
