-- memsif_lite schema step 14: session items (docs/python.md, "Session items").
-- What an agent framework keeps with a conversation that is not chat: a tool call, its output, a
-- reasoning item — one JSON object per row, stored for the session as it came and never indexed
-- (no FTS5 row, no vector; segmentation, CoreFact extraction, search and context never read it).
-- `message_id`: the session's last message when the item was added (NULL: none yet); the item
-- sits after it in `Memory.items(session)`, and goes when that message is forgotten.
-- AUTOINCREMENT: an item id is never given again (a stale `forget(item_id=)` can only miss); the
-- table has no FTS5 or vec0 mirror, so the reasons of sql/0010 for a high-water mark do not apply.
CREATE TABLE session_items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL,
    message_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
    at TEXT NOT NULL,
    item TEXT NOT NULL
);
CREATE INDEX session_items_session ON session_items(session, id);
CREATE INDEX session_items_message ON session_items(message_id);
