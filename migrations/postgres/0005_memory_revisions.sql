-- As SQLite's 0010_memory_revisions.sql.

ALTER TABLE memory_scopes ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;
