-- Gives one lease back, guarded by (id, lock_token) and running: available at once, keeping
-- its place (run_at never moved later than ?3, the database's now), the attempt not counted,
-- the error history ?4 (with a `released` entry when the execution ran), the lease and
-- stuck_since cleared. Returns the queue when released.
-- ?5: the execution never started. A job given back before its first attempt ever started (the
-- refund brings it to attempt 0, and it never snoozed nor has any entry in its history) holds its unique key again when the claim had spent it
-- ('started' becomes 'spent' at the claim), unless another job took the key meanwhile (that
-- one keeps it): it has not started, so `UntilStarted` still holds it. One writer at a time:
-- the check and the write see the same rows.
-- An execution that ran (?5 false) is released only while the job's `interruptions` (migration
-- 0018) is below ?6 (`MAX_REFUNDED_INTERRUPTIONS`), and adds one to it; past that its lease runs
-- out and the rescuer counts the attempt, so that what stops one job again and again cannot
-- retry it for ever.
UPDATE job_jobs
SET state        = 'available',
    attempt      = attempt - 1,
    interruptions = interruptions + CASE WHEN ?5 THEN 0 ELSE 1 END,
    run_at       = min(run_at, ?3),
    errors       = ?4,
    unique_scope = CASE WHEN ?5 AND attempt = 1 AND snoozes = 0
                             AND errors = '[]' AND unique_scope = 'spent'
                             AND unique_key IS NOT NULL
                             AND NOT EXISTS (
                                 SELECT 1 FROM job_jobs a
                                 WHERE a.kind = job_jobs.kind
                                   AND a.unique_key = job_jobs.unique_key
                                   AND a.id <> job_jobs.id AND (
                                       a.unique_scope = 'pruned'
                                       OR (a.unique_scope = 'finished'
                                           AND a.state IN ('scheduled', 'available', 'running',
                                                           'retryable'))
                                       OR (a.unique_scope = 'started'
                                           AND a.state IN ('scheduled', 'available',
                                                           'retryable'))))
                        THEN 'started' ELSE unique_scope END,
    lock_token   = NULL,
    locked_until = NULL,
    locked_by    = NULL,
    stuck_since  = NULL
WHERE id = ?1 AND lock_token = ?2 AND state = 'running'
  AND (?5 OR interruptions < ?6)
RETURNING queue
