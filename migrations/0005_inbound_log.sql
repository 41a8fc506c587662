-- Dedupe records and queued messages moved to the append-only inbound log
-- (src/state/inbound_log). Their rows are carried over by `state::legacy` when the
-- database is next opened, which then drops these tables.
ALTER TABLE inbound_seen RENAME TO legacy_inbound_seen;
ALTER TABLE queued_messages RENAME TO legacy_queued_messages;
DROP INDEX IF EXISTS inbound_seen_by_time;
DROP INDEX IF EXISTS queued_messages_by_session;
