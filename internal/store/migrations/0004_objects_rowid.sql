-- Objects in a table with rowids, keyed by an index on kind+name. An
-- object's JSON is one to a few kilobytes: in a WITHOUT ROWID table a
-- page holds only two or three of them, and a read and rewrite of one
-- row costs about 40 % more, a list of a kind more than twice as much.
CREATE TABLE objects_rowid (
    id     INTEGER PRIMARY KEY,
    kind   TEXT NOT NULL,
    name   TEXT NOT NULL,
    uid    TEXT NOT NULL UNIQUE,
    rv     INTEGER NOT NULL,
    data   BLOB NOT NULL,
    labels TEXT NOT NULL DEFAULT '{}',
    UNIQUE (kind, name)
);
INSERT INTO objects_rowid (kind, name, uid, rv, data, labels)
    SELECT kind, name, uid, rv, data, labels FROM objects ORDER BY kind, name;
DROP TABLE objects;
ALTER TABLE objects_rowid RENAME TO objects;
