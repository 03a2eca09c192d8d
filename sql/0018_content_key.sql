-- memsif_lite schema step 18: a smaller content-hash index (issue 31: one million messages).
-- `messages.content_hash` (sha256, 32 bytes) finds the stored vector of a passage already embedded
-- (Messages.vector_by_hash, the only query that reads it by value). Its index held the whole hash:
-- 41 bytes a message of a 1,579-byte LoCoMo-text file at a million. It now holds the first 8 bytes
-- (an expression index); the lookup asks for that prefix and then the whole hash, so a prefix shared
-- by two passages (by chance, or made on purpose) can only cost one more row read, never give back
-- another passage's vector.
DROP INDEX messages_content_hash;
CREATE INDEX messages_content_key ON messages(substr(content_hash, 1, 8));
