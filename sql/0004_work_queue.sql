-- memsif_lite schema step 4: the durable work queue of the paper's pipeline.
-- `add` stores a message and its `place` step in one short transaction; a worker takes the
-- steps in (message_id, sub) order: place the message (boundary decision) -> when that closed a
-- segment: close it (title, trajectory) -> extract its CoreFact candidates -> one step per
-- candidate (Add/Update/Merge/Supersede). LLM calls happen between steps, never inside a write.
CREATE TABLE work_queue(
    id         INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL,          -- the message whose arrival created the step (queue order)
    sub        INTEGER NOT NULL,          -- 0 place, 1 close, 2 extract, 3.. one CoreFact candidate each
    kind       TEXT NOT NULL,             -- place | close | extract | fact
    segment_id INTEGER,                   -- close / extract: the closed segment
    payload    TEXT,                      -- fact: the candidate, JSON
    created_at TEXT NOT NULL,
    attempts   INTEGER NOT NULL DEFAULT 0,
    UNIQUE(message_id, sub)
) STRICT;
