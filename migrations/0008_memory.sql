-- Long-term memory (issue 40): markdown documents per agent and scope, the versions their
-- writes replaced, each scope's totals (checked against its cap in the same write), the
-- documents' search chunks with a full-text index, and vectors by chunk text and model.

CREATE TABLE memory_documents (
    agent_id   TEXT NOT NULL,
    scope      TEXT NOT NULL,
    path       TEXT NOT NULL,
    content    TEXT NOT NULL,
    version    INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (agent_id, scope, path)
);

CREATE TABLE memory_versions (
    agent_id   TEXT NOT NULL,
    scope      TEXT NOT NULL,
    path       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    content    TEXT NOT NULL,
    written_ms INTEGER NOT NULL,
    PRIMARY KEY (agent_id, scope, path, version)
);

CREATE TABLE memory_scopes (
    agent_id   TEXT NOT NULL,
    scope      TEXT NOT NULL,
    docs       INTEGER NOT NULL,
    bytes      INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (agent_id, scope)
);

CREATE TABLE memory_chunks (
    id         INTEGER PRIMARY KEY,
    agent_id   TEXT NOT NULL,
    scope      TEXT NOT NULL,
    path       TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line   INTEGER NOT NULL,
    text       TEXT NOT NULL,
    hash       TEXT NOT NULL
);
CREATE INDEX memory_chunks_by_doc ON memory_chunks (agent_id, scope, path);
CREATE INDEX memory_chunks_by_hash ON memory_chunks (hash);

-- One row per chunk (rowid = memory_chunks.id). `scope` holds one token naming the chunk's
-- agent and scope, so a search intersects with it inside the index instead of filtering
-- every match of a common word in every scope.
CREATE VIRTUAL TABLE memory_fts USING fts5 (scope, body, tokenize = 'unicode61 remove_diacritics 2');

CREATE TABLE memory_embeddings (
    model  TEXT NOT NULL,
    hash   TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, hash)
) WITHOUT ROWID;
