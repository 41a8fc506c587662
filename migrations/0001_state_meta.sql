-- Facts about the state directory itself: when it was created and which Ferry last
-- opened it, for diagnostics and for migrations that need to know where data came from.
CREATE TABLE state_meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) STRICT;
