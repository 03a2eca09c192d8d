-- memsif_lite schema step 6: a smaller file and cheaper queries.
-- * Every vector table holds int8 codes with a per-vector scale (memsif_lite/int8.py: 1 byte per
--   dimension instead of 4; cosine distances do not depend on the scale) in smaller chunks, so a
--   small file does not carry mostly pre-allocated empty chunks.
-- * Segment and trajectory running sums become float32 (half the bytes; sums of at most a few
--   thousand unit vectors lose nothing measurable).
-- * messages.tokens: the token count of `text`, counted once at ingest instead of per query.
-- * meta 'vector_epoch': bumped in the same transaction by every write that removes or rewrites
--   message vectors (forget, import), so in-process vector caches see other processes' deletions.
-- The vectors are moved through _v5_stash; the Python data step of this migration
-- (store.DATA_STEPS[5]) quantises them into the new tables, converts the sums, counts the tokens
-- and drops the stash.
CREATE TABLE _v5_stash(tbl TEXT NOT NULL, id INTEGER NOT NULL, v BLOB NOT NULL) STRICT;
INSERT INTO _v5_stash SELECT 'message_vec', rowid, embedding FROM message_vec;
INSERT INTO _v5_stash SELECT 'segment_vec', rowid, embedding FROM segment_vec;
INSERT INTO _v5_stash SELECT 'trajectory_vec', rowid, embedding FROM trajectory_vec;
INSERT INTO _v5_stash SELECT 'fact_vec', rowid, embedding FROM fact_vec;
INSERT INTO _v5_stash SELECT 'active_fact_vec', rowid, embedding FROM active_fact_vec;
DROP TABLE message_vec;
DROP TABLE segment_vec;
DROP TABLE trajectory_vec;
DROP TABLE fact_vec;
DROP TABLE active_fact_vec;
CREATE VIRTUAL TABLE message_vec USING vec0(embedding int8[{dim}] distance_metric=cosine, chunk_size=64);
CREATE VIRTUAL TABLE segment_vec USING vec0(embedding int8[{dim}] distance_metric=cosine, chunk_size=16);
CREATE VIRTUAL TABLE trajectory_vec USING vec0(embedding int8[{dim}] distance_metric=cosine, chunk_size=16);
CREATE VIRTUAL TABLE fact_vec USING vec0(embedding int8[{dim}] distance_metric=cosine, chunk_size=16);
CREATE VIRTUAL TABLE active_fact_vec USING vec0(embedding int8[{dim}] distance_metric=cosine, chunk_size=8);
ALTER TABLE messages ADD COLUMN tokens INTEGER;
INSERT INTO meta(key, value) VALUES('vector_epoch', '0') ON CONFLICT(key) DO NOTHING;
