-- memsif_lite schema step 15: the dense partition of message vectors (issue 31; docs/architecture.md,
-- "Dense search at scale"). An inverted-file index: spherical k-means centroids of the messages'
-- int8 codes, and each message's nearest centroid (its list). A dense search of a large memory
-- scores the centroids, then only the messages of the nearest lists (a share of the rows) and
-- every message not yet given a list; the ranking inside is the exact one. The partition is a
-- hint, never the truth: a list lost, stale or damaged can only cost recall, never return a row
-- that is not there, and `memsif process` rebuilds it.
-- * vector_partition: at most one row, the current version: `lists` centroids of `dim` float32
--   each, trained when the file held `trained_rows` message vectors; every message with an id up
--   to `assigned_through` has its list (messages come with ever larger ids: sql/0010);
-- * vector_lists: message ids in blocks of 4,096 (block b holds ids 4096*b .. 4096*b+4095), for each
--   a little-endian uint16 list number, 65535 for "none"; a block of another version is stale.
--   Ids are never given twice (sql/0010), so an id's list stays right until the next version.
-- * meta 'partition_stamp': bumped by every write to either table (readers reload the lists).
CREATE TABLE vector_partition (
    version INTEGER PRIMARY KEY,
    trained_rows INTEGER NOT NULL,
    lists INTEGER NOT NULL,
    dim INTEGER NOT NULL,
    centroids BLOB NOT NULL,
    assigned_through INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE vector_lists (
    block INTEGER PRIMARY KEY,
    version INTEGER NOT NULL,
    lists BLOB NOT NULL
);
INSERT INTO meta(key, value) VALUES('partition_stamp', '0') ON CONFLICT(key) DO NOTHING;
