-- memsif_lite schema step 2: Structured Interaction Memory (paper §3.2).
-- Key entities per message; Topical Segments (contiguous runs of messages) and Event
-- Trajectories (non-contiguous segments of one evolving event). Composite embeddings are
-- kept as a running float32 sum plus a count; the *_vec tables hold the normalised mean.
CREATE TABLE trajectories(
    id          INTEGER PRIMARY KEY,
    n_segments  INTEGER NOT NULL,
    n_messages  INTEGER NOT NULL,
    vec_sum     BLOB NOT NULL,             -- float64 sum of member message vectors
    entities    TEXT NOT NULL,            -- JSON object entity -> count (the union is its keys)
    start_at    TEXT NOT NULL,
    end_at      TEXT NOT NULL,
    title       TEXT                      -- LLM title when one is configured
) STRICT;

CREATE TABLE segments(
    id            INTEGER PRIMARY KEY,
    trajectory_id INTEGER REFERENCES trajectories(id),   -- NULL while the segment is open
    n_messages    INTEGER NOT NULL,
    vec_sum       BLOB NOT NULL,
    entities      TEXT NOT NULL,          -- JSON object entity -> count
    start_at      TEXT NOT NULL,
    end_at        TEXT NOT NULL,
    closed        INTEGER NOT NULL DEFAULT 0,
    title         TEXT
) STRICT;
CREATE INDEX segments_trajectory ON segments(trajectory_id);

-- one row per message: its key entities and how the boundary rule placed it
CREATE TABLE message_units(
    message_id INTEGER PRIMARY KEY REFERENCES messages(id),
    segment_id INTEGER NOT NULL REFERENCES segments(id),
    entities   TEXT NOT NULL,             -- JSON list, sorted
    phi        REAL,                      -- φ(message, open segment); NULL for a first message
    decision   TEXT NOT NULL              -- first | merge | split | judge_merge | judge_split
) STRICT;
CREATE INDEX message_units_segment ON message_units(segment_id);

CREATE VIRTUAL TABLE segment_vec USING vec0(embedding float[{dim}] distance_metric=cosine, chunk_size=64);
CREATE VIRTUAL TABLE trajectory_vec USING vec0(embedding float[{dim}] distance_metric=cosine, chunk_size=64);
