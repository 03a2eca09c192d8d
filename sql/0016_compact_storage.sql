-- memsif_lite schema step 16: a smaller file (issue 31: one million messages).
-- * A segment linked to a trajectory keeps no running sum (`segments.vec_sum` = x''): it is never
--   added to again, its search vector is in segment_vec, and reading it back recomputes the sum from
--   its members' vectors (memsif_lite/db/structure.py, NO_SUM). The sum was most of a segment row.
UPDATE segments SET vec_sum = x'' WHERE trajectory_id IS NOT NULL;
-- * messages_speaker_at goes: it indexed what messages_speaker (speaker COLLATE NOCASE, at) does; the
--   exact-speaker lookups of an idempotent add ask that one for the case-blind match first.
DROP INDEX messages_speaker_at;
-- * The before images of a change (schema 13) move from `before` (JSON text) to `images`: the same
--   JSON, deflated against a preset dictionary (memsif_lite/db/rewind.py: pack, unpack; a place's
--   images take about 51 bytes instead of 137). The data step (store.DATA_STEPS[16]) packs the rows
--   so far and drops `before`.
ALTER TABLE change_log ADD COLUMN images BLOB;
