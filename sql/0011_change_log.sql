-- memsif_lite schema step 11: the change log (docs/history.md).
-- One row per change to derived state: a CoreFact operation, a message placed in a segment, a segment
-- linked to a trajectory, an ActiveFact promoted / restated / withdrawn, a forget, a merge, an undo.
-- Rows are only ever appended; `forget` erases the content of the rows that hold what it forgets
-- (summary and undo images become NULL), never a row. Written by the data-access layer in the same
-- transaction as the change (memsif_lite/db/changes.py), not by triggers: memsif runs with triggers
-- disabled (a received file must not run code) and only the writer knows the actor and the prompt.
CREATE TABLE change_log(
    id       INTEGER PRIMARY KEY,
    at       TEXT NOT NULL,          -- record time: when memsif made the change (stored UTC)
    actor    TEXT NOT NULL,          -- rule | llm:<model> | user | merge:<file id>
    op       TEXT NOT NULL,          -- fact.add | fact.update | fact.merge | fact.supersede | place | link |
                                     -- active.promote | active.restate | active.withdraw | forget | merge |
                                     -- undo | baseline
    purpose  TEXT,                   -- the purpose of the prompt whose answer decided it
    summary  TEXT,                   -- one line: the statement written (NULL once forgotten)
    ids      TEXT NOT NULL,          -- JSON object of what it touched: {"facts": [...], "messages": [...], ...}
    undo     TEXT,                   -- JSON: what taking a CoreFact change back restores (NULL: not undoable)
    decision TEXT,                   -- hash of the candidate a fact change wrote: an undone one is not redone
    undoes   INTEGER,                -- op 'undo': the change it took back
    origin   TEXT                    -- the file that recorded it when it came with a merge (NULL: this file)
) STRICT;
CREATE INDEX change_log_at ON change_log(at);
CREATE INDEX change_log_undoes ON change_log(undoes) WHERE undoes IS NOT NULL;
CREATE INDEX change_log_decision ON change_log(decision) WHERE decision IS NOT NULL;

-- which changes touched which CoreFact: `memsif log --fact`, and the later changes an undo takes back
CREATE TABLE change_facts(
    fact_id   INTEGER NOT NULL,
    change_id INTEGER NOT NULL REFERENCES change_log(id),
    PRIMARY KEY(fact_id, change_id)
) STRICT, WITHOUT ROWID;

-- a file names itself, so that a merged-in change says which file recorded it
INSERT INTO meta(key, value) VALUES('file_id', lower(hex(randomblob(16)))) ON CONFLICT(key) DO NOTHING;

-- what a file already held when it got its log: one row explains it (not undoable)
INSERT INTO change_log(at, actor, op, summary, ids)
    SELECT strftime('%Y-%m-%dT%H:%M:%S', 'now'), 'memsif', 'baseline',
           'state before the change log (schema 11)',
           json_object('facts', json((SELECT json_group_array(id) FROM core_facts)))
    WHERE EXISTS(SELECT 1 FROM core_facts) OR EXISTS(SELECT 1 FROM segments);
INSERT INTO change_facts(fact_id, change_id)
    SELECT f.id, c.id FROM core_facts f, change_log c WHERE c.op='baseline';
