-- 0011 prune by state: the pruner reads what it deletes, not every dead letter. Append-only:
-- change the schema in a new numbered file.
--
-- job_jobs_finalized_idx held every finished row, dead letters too, which are never pruned. So
-- each prune (every worker, every 10 s, under the file's one write lock, which claims and
-- heartbeats wait for) walked every dead letter older than the cut-off to find the completed
-- and cancelled rows to delete, even when there were none: 0.15 s with a million dead letters.
-- One index per pruned state, each read only up to its batch (job-postgres's 0017 did the
-- same). The old index has no other reader (a list's finalized range is not planned through
-- it), so it goes: a finish still writes one entry, and a dead letter none.

CREATE INDEX job_jobs_completed_idx ON job_jobs (finalized_at)
    WHERE state = 'completed';
-- A cancelled job is pruned once it is finished and due past the retention (a job cancelled
-- before its run time, a periodic job's next period, keeps its unique key until then): read in
-- the order of the later of the two, so that such rows are not walked by every pass.
CREATE INDEX job_jobs_cancelled_idx ON job_jobs (max(finalized_at, run_at))
    WHERE state = 'cancelled';
DROP INDEX job_jobs_finalized_idx;
