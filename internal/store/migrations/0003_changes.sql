-- The change log: every write of an object appends the object as it was
-- written (for a deletion, its last state), at the write's revision. A
-- watch resumes from a revision by reading the changes after it, so
-- watches survive a restart of the server. Old changes are compacted away;
-- compacted_rv in revision says up to which revision they are gone.
CREATE TABLE changes (
    rv          INTEGER PRIMARY KEY,
    kind        TEXT NOT NULL,
    name        TEXT NOT NULL,
    type        TEXT NOT NULL,
    data        BLOB NOT NULL,
    prev_labels TEXT
);
CREATE INDEX changes_kind ON changes (kind, rv);
ALTER TABLE revision ADD COLUMN compacted_rv INTEGER NOT NULL DEFAULT 0;
-- Revisions before the log existed cannot be replayed.
UPDATE revision SET compacted_rv = rv;
