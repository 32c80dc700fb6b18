-- 0008 staging: a claim whose cost follows what it returns.
--
-- The claim reads only `available` rows, through jobs_claim_idx by queue and kind: one bounded
-- index scan per kind the worker runs, not paused and with room under its limit. Jobs
-- scheduled for later, retries waiting out their backoff, kinds no worker of the queue runs,
-- paused kinds and kinds at their limit are never read by it (with the old queue-wide index a
-- claim walked past every one of them: 62-91 ms a claim over 100,000 such rows).
--
-- `scheduled` and `retryable` rows become `available` when due through the stager
-- (job-postgres/src/sql/stage.sql), which every worker runs every poll interval, reading only
-- due rows through jobs_due_idx. A row keeps its run_at when staged, so its place in the
-- claim's order (priority, run_at, id) is the one it had.
--
-- Creating the indexes locks writes to job.jobs while they build (a migration runs in a
-- transaction, where CREATE INDEX CONCURRENTLY cannot); on a large table, apply it when the
-- queue is quiet. Append-only: change the schema in a new numbered file.

DROP INDEX job.jobs_claim_idx;

CREATE INDEX jobs_claim_idx ON job.jobs (queue, kind, priority, run_at, id)
    WHERE state = 'available';

CREATE INDEX jobs_due_idx ON job.jobs (queue, run_at)
    WHERE state IN ('scheduled', 'retryable');
