-- Routing state (SPEC §3): DM pairing and inbound dedupe. Times are Unix milliseconds (UTC).

-- Pairing codes handed to unknown DM senders, waiting for `ferry pairing approve`.
-- One pending code per sender per channel; codes are unique per channel.
CREATE TABLE pairing_requests (
    channel     TEXT NOT NULL,
    sender_id   TEXT NOT NULL,
    sender_name TEXT,
    code        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (channel, sender_id),
    UNIQUE (channel, code)
) STRICT;

-- DM senders an operator approved; they may talk to the bot from then on.
CREATE TABLE pairing_approved (
    channel     TEXT NOT NULL,
    sender_id   TEXT NOT NULL,
    sender_name TEXT,
    approved_at INTEGER NOT NULL,
    PRIMARY KEY (channel, sender_id)
) STRICT;

-- Inbound messages seen recently, so a redelivery (after a reconnect or a restart) never
-- starts a second run. thread_id is '' for messages outside a thread. Rows older than the
-- dedupe window are pruned.
CREATE TABLE inbound_seen (
    channel    TEXT NOT NULL,
    account_id TEXT NOT NULL,
    chat_id    TEXT NOT NULL,
    thread_id  TEXT NOT NULL,
    message_id TEXT NOT NULL,
    seen_at    INTEGER NOT NULL,
    PRIMARY KEY (channel, account_id, chat_id, thread_id, message_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX inbound_seen_by_time ON inbound_seen (seen_at);
