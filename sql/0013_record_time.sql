-- memsif_lite schema step 13: record time (docs/history.md, "Two clocks").
-- `messages.known_at`: when this file learnt the message (the local clock at `add`, at the `import`
-- that loaded it, at the `merge` that brought it in; a message a merge places again keeps its own).
-- `created_at` stays what it was (a merge copies it from the file that first stored the message).
-- An older file has no record time of its own for its messages: they get their `created_at`, which
-- for a message that came with a merge before schema 13 is when the other file stored it (earlier
-- than this file learnt it: a `known_at` read of that time already shows it).
-- `change_log.before`: the before images of the rows a change wrote (CoreFacts and their sources,
-- segments, trajectories, placements, ActiveFacts; vectors and running sums left out), kept so that
-- `known_at=` can rewind the derived state from the current one (NULL: none kept — a forget, a
-- change copied from another file, a change logged before schema 13).
ALTER TABLE messages ADD COLUMN known_at TEXT;
UPDATE messages SET known_at = created_at;
CREATE INDEX messages_known_at ON messages(known_at);
ALTER TABLE change_log ADD COLUMN before TEXT;
