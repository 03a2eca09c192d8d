-- memsif_lite schema step 16: a smaller file (issue 31: one million messages).
-- * `segments.vec_sum` is empty (x''). A segment's running sum was most of its row, and is needed only
--   until the segment is linked to a trajectory (never added to again; its search vector is in
--   segment_vec): the open segment and a closed one waiting for its link keep it in `segment_sums`
--   (a few rows), so a segments row is written at the size it keeps and its pages stay full. A linked
--   segment read back sums its members' vectors (memsif_lite/db/structure.py: NO_SUM, STOW_SUMS).
CREATE TABLE segment_sums(
    segment_id INTEGER PRIMARY KEY,
    vec_sum    BLOB NOT NULL              -- float32 sum of the member message vectors
) STRICT;
INSERT OR REPLACE INTO segment_sums(segment_id, vec_sum) SELECT id, vec_sum FROM segments WHERE trajectory_id IS NULL AND length(vec_sum) > 0;
UPDATE segments SET vec_sum = x'' WHERE length(vec_sum) > 0;
-- * Entities are stored as JSON without spaces (a placement's list, a segment's and a trajectory's
--   counts): json() writes the same values minified, in the same order.
UPDATE message_units SET entities = json(entities) WHERE json_valid(entities) AND entities != json(entities);
UPDATE segments SET entities = json(entities) WHERE json_valid(entities) AND entities != json(entities);
UPDATE trajectories SET entities = json(entities) WHERE json_valid(entities) AND entities != json(entities);
-- * messages_speaker_at goes: it indexed what messages_speaker (speaker COLLATE NOCASE, at) does; the
--   exact-speaker lookups of an idempotent add ask that one for the case-blind match first.
DROP INDEX messages_speaker_at;
-- * The before images of a change (schema 13) move from `before` (JSON text) to `images`: the same
--   JSON, deflated against a preset dictionary (memsif_lite/db/rewind.py: pack, unpack; a place's
--   images take about 51 bytes instead of 137). The data step (store.DATA_STEPS[16]) packs the rows
--   so far and drops `before`.
ALTER TABLE change_log ADD COLUMN images BLOB;
