-- Fewer pages touched per message and per run (issue 4 throughput): every index a hot
-- write updates is another random page rewritten in the WAL.

-- Queued messages are only ever read in id order (restart) and removed by id.
DROP INDEX queued_messages_by_session;

-- Sessions are always looked up by key: keyed by it directly, a session is one B-tree
-- entry instead of a table row plus an index entry.
CREATE TABLE sessions_by_key (
    key              TEXT PRIMARY KEY NOT NULL,
    session_id       TEXT NOT NULL,
    created_at       INTEGER NOT NULL,          -- unix ms
    updated_at       INTEGER NOT NULL,          -- unix ms, last message
    input_tokens     INTEGER NOT NULL DEFAULT 0,
    output_tokens    INTEGER NOT NULL DEFAULT 0,
    compaction_count INTEGER NOT NULL DEFAULT 0,
    overrides        TEXT NOT NULL DEFAULT '{}', -- JSON: queue mode/debounce/cap/drop, model, verbose
    active_run_id    TEXT                        -- the one run allowed to append (fencing)
) STRICT, WITHOUT ROWID;
INSERT INTO sessions_by_key
    SELECT key, session_id, created_at, updated_at, input_tokens, output_tokens, compaction_count, overrides,
           active_run_id
    FROM sessions;
DROP TABLE sessions;
ALTER TABLE sessions_by_key RENAME TO sessions;
