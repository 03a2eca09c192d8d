-- memsif_lite schema step 5: filters, idempotent ingest, local time.
-- Filters (speaker, session, time) run inside the KNN / full-text queries as
-- `rowid IN (SELECT id FROM messages WHERE ...)`: these indexes keep that subquery cheap.
-- (messages(session) exists since step 1.)
CREATE INDEX messages_speaker ON messages(speaker COLLATE NOCASE, at);
CREATE INDEX messages_at ON messages(at);
-- "already present" on re-ingest: same source_id (and speaker), or same speaker + time + text
CREATE INDEX messages_source_id ON messages(source_id) WHERE source_id IS NOT NULL;
CREATE INDEX messages_speaker_at ON messages(speaker, at);
-- the UTC offset (minutes) of the time the caller gave; NULL for naive times (taken as UTC)
ALTER TABLE messages ADD COLUMN utc_offset_min INTEGER;
