-- Conversations: one row per session key, its current session id, counters and the
-- per-session overrides users set with /queue.
CREATE TABLE sessions (
    key              TEXT PRIMARY KEY NOT NULL,
    session_id       TEXT NOT NULL,
    created_at       INTEGER NOT NULL,          -- unix ms
    updated_at       INTEGER NOT NULL,          -- unix ms, last message
    input_tokens     INTEGER NOT NULL DEFAULT 0,
    output_tokens    INTEGER NOT NULL DEFAULT 0,
    compaction_count INTEGER NOT NULL DEFAULT 0,
    overrides        TEXT NOT NULL DEFAULT '{}', -- JSON: queue mode/debounce/cap/drop, model, verbose
    active_run_id    TEXT                        -- the one run allowed to append (fencing)
) STRICT;

-- Append-only transcript of each session id: user, assistant, tool results, summaries.
CREATE TABLE transcript_entries (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    parent_id  INTEGER REFERENCES transcript_entries(id),
    run_id     TEXT,
    role       TEXT NOT NULL,                   -- user | assistant | tool_result | compaction
    content    TEXT NOT NULL,                   -- JSON of the entry
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX transcript_entries_by_session ON transcript_entries (session_id, id);

-- Accepted messages not yet answered: removed only after their run finished, so a crash
-- re-runs them instead of losing them.
CREATE TABLE queued_messages (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key TEXT NOT NULL,
    message     TEXT NOT NULL,                  -- JSON InboundMessage
    prompt      TEXT NOT NULL,                  -- what the model is asked
    enqueued_at INTEGER NOT NULL
) STRICT;
CREATE INDEX queued_messages_by_session ON queued_messages (session_key, id);
