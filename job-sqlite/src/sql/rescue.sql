-- Recovers job ?1 whose lease (token ?2) expired before ?5 (the database's now ?3, or the
-- rescuer's clock check when earlier: lease.rs): discarded (finalized at ?3) when
-- its attempts are exhausted and its last attempt started (its start recorded under this
-- lease: record_start.sql), else retryable, keeping its run_at, with the attempt counted
-- unless it was a last attempt that never started (then its `UntilStarted` key is held
-- again, as release.sql gives it back). A job whose cancel was requested is never
-- discarded here: retryable, the expirer ends it `cancelled` (expire_pick.sql), whatever
-- attempts it has left.
-- The error history ?4 holds the caller's lease_expired entry (not written for a last attempt
-- that never started, which goes back as a release of an unstarted job does). Returns the new state,
-- the queue and the kind.
UPDATE job_jobs
SET state        = CASE WHEN attempt >= max_attempts AND NOT cancel_requested
                             AND started_lease IS lock_token THEN 'discarded'
                        ELSE 'retryable' END,
    finalized_at = CASE WHEN attempt >= max_attempts AND NOT cancel_requested
                             AND started_lease IS lock_token THEN ?3 END,
    attempt      = CASE WHEN attempt >= max_attempts AND started_lease IS NOT lock_token
                        THEN attempt - 1 ELSE attempt END,
    -- A last attempt that never started goes back as a release of an unstarted job does,
    -- with no entry.
    errors       = CASE WHEN attempt >= max_attempts AND started_lease IS NOT lock_token
                        THEN errors ELSE ?4 END,
    -- An `UntilStarted` key spent by the claim of a first attempt that never started is held
    -- again, unless another job took it meanwhile (release.sql's rule; one writer at a time:
    -- the check and the write see the same rows).
    unique_scope = CASE WHEN attempt >= max_attempts AND started_lease IS NOT lock_token
                             AND attempt = 1 AND snoozes = 0 AND errors = '[]'
                             AND unique_scope = 'spent' AND unique_key IS NOT NULL
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
WHERE id = ?1 AND lock_token = ?2 AND state = 'running' AND locked_until < ?5
RETURNING state, queue, kind
