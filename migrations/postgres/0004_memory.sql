-- Long-term memory (issue 40): as SQLite's 0008_memory.sql, with the full-text index as a
-- `tsvector` column (built with the 'simple' configuration from the normalized text the
-- memory room gives) under a GIN index.

CREATE TABLE memory_documents (
    agent_id   TEXT NOT NULL,
    scope      TEXT NOT NULL,
    path       TEXT NOT NULL,
    content    TEXT NOT NULL,
    version    BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    PRIMARY KEY (agent_id, scope, path)
);

CREATE TABLE memory_versions (
    agent_id   TEXT NOT NULL,
    scope      TEXT NOT NULL,
    path       TEXT NOT NULL,
    version    BIGINT NOT NULL,
    content    TEXT NOT NULL,
    written_ms BIGINT NOT NULL,
    PRIMARY KEY (agent_id, scope, path, version)
);

CREATE TABLE memory_scopes (
    agent_id   TEXT NOT NULL,
    scope      TEXT NOT NULL,
    docs       BIGINT NOT NULL,
    bytes      BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    PRIMARY KEY (agent_id, scope)
);

CREATE TABLE memory_chunks (
    id         BIGSERIAL PRIMARY KEY,
    agent_id   TEXT NOT NULL,
    scope      TEXT NOT NULL,
    path       TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line   INTEGER NOT NULL,
    text       TEXT NOT NULL,
    hash       TEXT NOT NULL,
    tsv        TSVECTOR NOT NULL
);
CREATE INDEX memory_chunks_by_doc ON memory_chunks (agent_id, scope, path);
CREATE INDEX memory_chunks_by_hash ON memory_chunks (hash);
CREATE INDEX memory_chunks_tsv ON memory_chunks USING GIN (tsv);

CREATE TABLE memory_embeddings (
    model  TEXT NOT NULL,
    hash   TEXT NOT NULL,
    vector BYTEA NOT NULL,
    PRIMARY KEY (model, hash)
);
