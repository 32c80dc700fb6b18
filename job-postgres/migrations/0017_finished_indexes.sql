-- 0017 the pruner reads only what it deletes. Append-only: change the schema in a new
-- numbered file.
--
-- jobs_finalized_idx (migration 0001) held every finished row, dead letters included, and
-- prune.sql's one condition over it (completed past one retention, or cancelled past
-- another) gave it no index condition: every pass walked every finished row, the dead letters
-- kept until purged and the jobs still within their retention alike (with 200,000 dead
-- letters and 105,000 finished jobs, a pass with nothing to delete read 305,000 rows in
-- 54-92 ms, every 10 s on every worker; now none, in 0.3-0.4 ms). Each state the pruner
-- deletes has an index of its own, which prune.sql reads up to that state's cutoff; dead
-- letters are only in jobs_discarded_idx (migration 0002). A finished row still enters one of
-- these indexes (a discarded one: one instead of two), so a finalize does no more index work
-- than before.
--
-- What read finished jobs by time whatever their state reads each state's index and merges
-- (inspect_overview.sql's recently finished jobs, job_filter.sql's finalized range).
--
-- Creating the indexes locks writes to job.jobs while they build (a migration runs in a
-- transaction, where CREATE INDEX CONCURRENTLY cannot); on a large table, apply it when the
-- queue is quiet.

DROP INDEX job.jobs_finalized_idx;

-- Completed jobs by when they finished: the pruner's completed retention.
CREATE INDEX jobs_completed_idx ON job.jobs (finalized_at)
    WHERE state = 'completed';

-- Cancelled jobs by when they finished: the pruner's cancelled retention.
CREATE INDEX jobs_cancelled_idx ON job.jobs (finalized_at)
    WHERE state = 'cancelled';
