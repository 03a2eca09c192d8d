-- memsif_lite schema step 3: Dual-Track Fact Memory (paper §3.3, §3.4).
-- CoreFacts are written at ingest and never silently lost: Supersede closes a fact's validity
-- (valid_to, superseded_by) and keeps it; every change is a row of fact_history.
CREATE TABLE core_facts(
    id            INTEGER PRIMARY KEY,
    subject       TEXT NOT NULL,
    type          TEXT NOT NULL,
    stmt          TEXT NOT NULL,
    slot          TEXT,                   -- single-valued attribute key (e.g. 'lives in'), if any
    valid_from    TEXT NOT NULL,          -- time of the first supporting message
    valid_to      TEXT,                   -- set when superseded
    superseded_by INTEGER REFERENCES core_facts(id),
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    origin        TEXT NOT NULL           -- 'rule' (offline extractor) or 'llm'
) STRICT;
CREATE INDEX core_facts_subject ON core_facts(subject, type);

CREATE TABLE fact_sources(
    fact_id    INTEGER NOT NULL REFERENCES core_facts(id),
    message_id INTEGER NOT NULL REFERENCES messages(id),
    PRIMARY KEY(fact_id, message_id)
) STRICT;
CREATE INDEX fact_sources_message ON fact_sources(message_id);

CREATE TABLE fact_history(
    id      INTEGER PRIMARY KEY,
    fact_id INTEGER NOT NULL REFERENCES core_facts(id),
    at      TEXT NOT NULL,
    op      TEXT NOT NULL,                -- add | update | merge | supersede | superseded
    stmt    TEXT NOT NULL,                -- the statement after the operation
    detail  TEXT
) STRICT;
CREATE INDEX fact_history_fact ON fact_history(fact_id);

CREATE VIRTUAL TABLE fact_vec USING vec0(embedding float[{dim}] distance_metric=cosine, chunk_size=64);

-- ActiveFact track: candidate clusters C_k = (s_k, X_k, Q_k, R_k) and promoted entries.
CREATE TABLE candidate_clusters(
    id         INTEGER PRIMARY KEY,
    subject    TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    score_src  REAL NOT NULL DEFAULT 0,
    score_qry  REAL NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX candidate_clusters_subject ON candidate_clusters(subject);

CREATE TABLE cluster_statements(           -- X_k
    id         INTEGER PRIMARY KEY,
    cluster_id INTEGER NOT NULL REFERENCES candidate_clusters(id),
    stmt       TEXT NOT NULL,
    vector     BLOB NOT NULL,
    at         TEXT NOT NULL
) STRICT;
CREATE INDEX cluster_statements_cluster ON cluster_statements(cluster_id);

CREATE TABLE cluster_evidence(             -- provenance of X_k; R_k = the distinct messages here
    statement_id INTEGER NOT NULL REFERENCES cluster_statements(id),
    message_id   INTEGER NOT NULL REFERENCES messages(id),
    PRIMARY KEY(statement_id, message_id)
) STRICT;
CREATE INDEX cluster_evidence_message ON cluster_evidence(message_id);

CREATE TABLE cluster_queries(              -- Q_k, near-duplicates removed
    id         INTEGER PRIMARY KEY,
    cluster_id INTEGER NOT NULL REFERENCES candidate_clusters(id),
    query      TEXT NOT NULL,
    vector     BLOB NOT NULL,
    at         TEXT NOT NULL
) STRICT;
CREATE INDEX cluster_queries_cluster ON cluster_queries(cluster_id);

CREATE TABLE active_facts(
    id         INTEGER PRIMARY KEY,
    cluster_id INTEGER NOT NULL UNIQUE REFERENCES candidate_clusters(id),
    subject    TEXT NOT NULL,
    stmt       TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
) STRICT;

CREATE VIRTUAL TABLE active_fact_vec USING vec0(embedding float[{dim}] distance_metric=cosine, chunk_size=64);
