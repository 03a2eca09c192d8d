-- memsif_lite schema step 19: a smaller file, continued (issue 31: one million messages).
-- * `messages.created_at` (when the file that first stored the message stored it) is '' where it is
--   the message's own `known_at` (when this file learnt it): every message added here, 26 bytes a
--   message. It differs only for a message that came with a merge or an import. A message's
--   created_at is read as `coalesce(nullif(created_at, ''), known_at)` (memsif_lite/db/messages.py:
--   CREATED_AT); an export writes it whole, as before.
UPDATE messages SET created_at = '' WHERE created_at = known_at;
-- * `change_log_at` indexes the second of a change's record time (`unixepoch(at)`: an integer of a
--   few bytes instead of 26 bytes of text, 47 → 15 bytes a message). The reads by record time (a
--   `known_at` rewind, `memsif log --since/--until`) read the rows they find anyway: they ask the
--   index for the seconds and the rows for the exact time (memsif_lite/db/changes.py: AT_INDEXED).
DROP INDEX change_log_at;
CREATE INDEX change_log_at ON change_log(unixepoch(at));
-- * Segment and CoreFact vectors in chunks of 32, not 16: a 16-vector chunk is a 6,144-byte blob,
--   one mostly empty leaf page and an overflow page each (a quarter of the table unused); a
--   32-vector chunk's 12,288 bytes fill their overflow pages. The vectors move through two stash
--   tables, each read in id order (its primary key: an ORDER BY would sort away vec_int8's subtype);
--   processes' vector caches reload (`vector_epoch`).
CREATE TABLE _v19_segment_vec(id INTEGER PRIMARY KEY, v BLOB NOT NULL) STRICT;
CREATE TABLE _v19_fact_vec(id INTEGER PRIMARY KEY, v BLOB NOT NULL) STRICT;
INSERT INTO _v19_segment_vec SELECT rowid, embedding FROM segment_vec;
INSERT INTO _v19_fact_vec SELECT rowid, embedding FROM fact_vec;
DROP TABLE segment_vec;
DROP TABLE fact_vec;
CREATE VIRTUAL TABLE segment_vec USING vec0(embedding int8[{dim}] distance_metric=cosine, chunk_size=32);
CREATE VIRTUAL TABLE fact_vec USING vec0(embedding int8[{dim}] distance_metric=cosine, chunk_size=32);
INSERT INTO segment_vec(rowid, embedding) SELECT id, vec_int8(v) FROM _v19_segment_vec;
INSERT INTO fact_vec(rowid, embedding) SELECT id, vec_int8(v) FROM _v19_fact_vec;
DROP TABLE _v19_segment_vec;
DROP TABLE _v19_fact_vec;
UPDATE meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) WHERE key='vector_epoch';
