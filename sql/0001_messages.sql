-- memsif_lite schema step 1: messages, their vectors and full-text index, LLM-call accounting.
-- `{dim}` is replaced by the embedding dimension recorded in `meta` when the file is created.
CREATE TABLE meta(
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;

CREATE TABLE messages(
    id           INTEGER PRIMARY KEY,
    speaker      TEXT NOT NULL,
    text         TEXT NOT NULL,
    at           TEXT NOT NULL,          -- ISO-8601, UTC, 'YYYY-MM-DDTHH:MM:SS[.ffffff]'
    session      TEXT,
    source_id    TEXT,                   -- id in the source conversation (LoCoMo dia_id)
    content_hash BLOB NOT NULL,          -- sha256 of the embedded passage text
    created_at   TEXT NOT NULL
) STRICT;
CREATE INDEX messages_content_hash ON messages(content_hash);
CREATE INDEX messages_session ON messages(session);

CREATE VIRTUAL TABLE message_vec USING vec0(embedding float[{dim}] distance_metric=cosine, chunk_size=256);

CREATE VIRTUAL TABLE message_fts USING fts5(
    speaker, text, content='messages', content_rowid='id',
    tokenize='porter unicode61 remove_diacritics 2'
);

CREATE TABLE llm_calls(
    id                INTEGER PRIMARY KEY,
    at                TEXT NOT NULL,
    purpose           TEXT NOT NULL,
    model             TEXT NOT NULL,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    latency_ms        REAL NOT NULL,
    ok                INTEGER NOT NULL,   -- 1: reply used; 0: failed, fallback used
    error             TEXT
) STRICT;
