-- A revision per memory scope, raised by every write to its documents and by new vectors
-- for its chunks, so a copy of the scope's vectors can be kept between searches and
-- trusted until it changes (issue 40's hybrid-search bench).

ALTER TABLE memory_scopes ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
