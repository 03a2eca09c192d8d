-- memsif_lite schema step 7: tombstones, so that forgetting survives a merge (memsif merge).
-- `forget` leaves the sha256 of the message's speaker, text and time: never the content. A merge
-- brings the other file's tombstones along and never adds (and removes) a message whose hash is here.
-- `local_at` is the forgotten message's time while this file's structure around it has not been
-- rebuilt yet (a merge rebuilds from there and clears it); it never travels to another file.
CREATE TABLE tombstones(
    hash       BLOB PRIMARY KEY,
    created_at TEXT NOT NULL,
    local_at   TEXT
) STRICT;
