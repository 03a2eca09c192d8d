-- memsif_lite schema step 10: ids are never reused.
-- An id names one message (one CoreFact) for the file's whole life: once forgotten, no later message
-- (fact) takes it, so a `forget` with an id read a moment earlier can only miss, never delete another
-- writer's newer message. SQLite gives a new rowid max(id)+1, which reuses the id of a forgotten last
-- row; so meta keeps a high-water mark per id space ('message_id_high', 'fact_id_high'), raised in the
-- same transaction as each delete, and every insert takes max(high-water mark, max(id)) + 1
-- (memsif_lite/db/messages.py: next_id, retire_id; a merge numbers from there too).
-- Chosen over rebuilding the tables with AUTOINCREMENT: messages carries an external-content FTS5
-- index, a vec0 table keyed by its rowid and foreign keys from five tables, and a rebuild would need
-- foreign keys off outside the migration's transaction; the mark is one meta row per id space and
-- travels in an export's header. The schema version still changes so that an older memsif_lite,
-- which would reuse ids, refuses the file. The marks start at the highest id seen so far.
INSERT INTO meta(key, value)
    SELECT 'message_id_high', CAST(max(coalesce((SELECT max(id) FROM messages), 0),
                                       coalesce((SELECT max(message_id) FROM work_queue), 0)) AS TEXT) WHERE 1
    ON CONFLICT(key) DO NOTHING;
INSERT INTO meta(key, value)
    SELECT 'fact_id_high', CAST(coalesce((SELECT max(id) FROM core_facts), 0) AS TEXT) WHERE 1
    ON CONFLICT(key) DO NOTHING;
