-- Scheduled jobs (issue 39): reminders, recurring tasks and the heartbeat, and their run
-- history. A job's fire is claimed by setting `running_slot_ms` (one fire in flight at most)
-- and journaled as an inbound message; `running_seq` is its journal id once journaled.
CREATE TABLE scheduled_jobs (
    id                 TEXT PRIMARY KEY,
    agent_id           TEXT NOT NULL,
    name               TEXT NOT NULL,
    owner              TEXT NOT NULL,
    created_by         TEXT NOT NULL,
    scope_channel      TEXT,
    scope_account      TEXT,
    scope_chat         TEXT,
    target_channel     TEXT NOT NULL,
    target_account     TEXT NOT NULL,
    target_chat        TEXT NOT NULL,
    target_chat_kind   TEXT NOT NULL,
    target_thread      TEXT,
    schedule_kind      TEXT NOT NULL,
    at_ms              INTEGER,
    every_secs         INTEGER,
    anchor_ms          INTEGER,
    cron_expr          TEXT,
    tz                 TEXT NOT NULL,
    payload_kind       TEXT NOT NULL,
    payload            TEXT NOT NULL,
    session_key        TEXT,
    missed             TEXT NOT NULL,
    grace_secs         INTEGER,
    state              TEXT NOT NULL,
    next_run_ms        INTEGER,
    running_slot_ms    INTEGER,
    running_seq        INTEGER,
    running_claimed_ms INTEGER,
    failures           INTEGER NOT NULL DEFAULT 0,
    last_error         TEXT,
    last_alert_hash    TEXT,
    last_alert_ms      INTEGER,
    created_ms         INTEGER NOT NULL,
    updated_ms         INTEGER NOT NULL
);
CREATE INDEX scheduled_jobs_due ON scheduled_jobs (next_run_ms) WHERE state = 'active' AND running_slot_ms IS NULL;
CREATE INDEX scheduled_jobs_by_chat ON scheduled_jobs (scope_channel, scope_account, scope_chat);
CREATE INDEX scheduled_jobs_by_agent ON scheduled_jobs (agent_id);

CREATE TABLE scheduled_runs (
    id          INTEGER PRIMARY KEY,
    job_id      TEXT NOT NULL,
    slot_ms     INTEGER NOT NULL,
    status      TEXT NOT NULL,
    started_ms  INTEGER NOT NULL,
    finished_ms INTEGER,
    delivered   INTEGER NOT NULL DEFAULT 0,
    late        INTEGER NOT NULL DEFAULT 0,
    error       TEXT,
    note        TEXT
);
CREATE INDEX scheduled_runs_by_job ON scheduled_runs (job_id, id);
