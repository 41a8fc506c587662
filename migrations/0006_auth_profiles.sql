-- Auth profiles' health (issue 20): a profile cooling down after a rate limit, an auth or a
-- billing error stays cooling across a restart, so a dead key is not hammered again.
CREATE TABLE auth_profile_health (
    provider      TEXT NOT NULL,
    profile       TEXT NOT NULL,
    cooling_until TEXT,
    reason        TEXT,
    error_count   INTEGER NOT NULL DEFAULT 0,
    last_used     TEXT,
    PRIMARY KEY (provider, profile)
) WITHOUT ROWID;
