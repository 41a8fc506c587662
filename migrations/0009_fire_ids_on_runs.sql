-- A fire's journal id moves from its job's row to its run's row (`scheduled_runs.seq`):
-- a claim's runs are consecutive rows of a page or two, its jobs one page each, so keeping
-- the id beside the run halves the pages a claim writes. `scheduled_jobs.running_seq` stays
-- (SQLite cannot drop a column cheaply) but is no longer written or read.

ALTER TABLE scheduled_runs ADD COLUMN seq INTEGER;

UPDATE scheduled_runs SET seq = (
    SELECT j.running_seq FROM scheduled_jobs j
    WHERE j.id = scheduled_runs.job_id AND j.running_slot_ms = scheduled_runs.slot_ms
) WHERE status = 'running';

UPDATE scheduled_jobs SET running_seq = NULL;
