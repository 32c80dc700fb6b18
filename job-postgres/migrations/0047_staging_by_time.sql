-- 0047 staging_by_time: the stager's cost follows the due rows, not the queues. Append-only:
-- change the schema in a new numbered file.
--
-- The stager (job-postgres/src/sql/stage.sql, every worker every poll interval) found the
-- queues holding `scheduled` or `retryable` rows with a loose scan of jobs_due_idx (queue,
-- run_at), one index probe per such queue, due or not, then read each queue's due rows. Its
-- cost grew with the number of queues holding a row due later: 200,000 queues with one row
-- each due in 9999 (which a role that may only enqueue can make) took 1.7-2.2 s a pass that
-- staged nothing, on every worker, every second; per-tenant queues of an ordinary application
-- paid a probe each on every pass. It now reads the due rows themselves, oldest first,
-- through this index, whatever their queue.
--
-- It holds only the waiting rows (`scheduled`, `retryable`), but building it reads the whole
-- table, in this migration's transaction (CREATE INDEX CONCURRENTLY cannot run in one):
-- writes to job.jobs wait while it builds, so on a large table apply it when the queue is
-- quiet.
-- jobs_due_idx stays: the reporter and `job inspect` count the waiting rows per queue.

CREATE INDEX jobs_staging_idx ON job.jobs (run_at)
    WHERE state IN ('scheduled', 'retryable');
