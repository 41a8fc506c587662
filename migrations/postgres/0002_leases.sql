-- Leases (several replicas on one database): who runs each session's lane, and who runs
-- each ingress singleton (a Telegram bot's poller, a Discord shard).
--
-- A lease is held by `owner` (a replica id) until `expires_at`, timed by this database's
-- clock, never a replica's. `epoch` grows by one at every change of hands and never goes
-- back (a released lease keeps it), so a write made under an old epoch can be told from one
-- made under the current one.

CREATE TABLE session_leases (
    key        text PRIMARY KEY,
    owner      text,
    epoch      bigint NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL DEFAULT '-infinity'
);

CREATE TABLE ingress_leases (
    name       text PRIMARY KEY,
    owner      text,
    epoch      bigint NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL DEFAULT '-infinity',
    cursor     text                              -- the singleton's position (a Telegram offset)
);

-- The sessions with messages waiting, for claiming them and for their owner's pickup.
CREATE INDEX inbound_journal_waiting ON inbound_journal (session_key, id) WHERE answered_at IS NULL;
