-- memsif_lite schema step 18: a smaller file, continued (issue 31: one million messages).
-- * `messages.content_hash` finds the stored vector of a passage already embedded (the file is the
--   embedding cache: Messages.vector_by_hash, the only query that reads it by value). The row kept
--   the whole sha256 (32 bytes) and its index all of it again: 73 bytes a message of a 1,579-byte
--   LoCoMo-text file at a million. A row now keeps the first 8 bytes (memsif_lite/db/messages.py:
--   CONTENT_KEY), indexed by that prefix (an expression index: a row that still holds all 32 bytes
--   is found too); a row whose key matches is used only if its own passage (speaker: text) hashes
--   to the hash asked for, so a key shared by chance or made on purpose can only cost a row read,
--   never give back another passage's vector.
DROP INDEX messages_content_hash;
UPDATE messages SET content_hash = substr(content_hash, 1, 8) WHERE length(content_hash) > 8;
CREATE INDEX messages_content_key ON messages(substr(content_hash, 1, 8));
-- * A segment linked to a trajectory keeps no entity counts (`entities` = ''): they are its members'
--   (`message_units.entities`), the counts placing them added up and a forget recounts, and what a
--   `known_at` rewind already derives. A linked segment read back counts them again
--   (memsif_lite/db/structure.py: NO_COUNTS); the open one and one waiting for its link keep theirs.
UPDATE segments SET entities = '' WHERE trajectory_id IS NOT NULL AND entities != '';
