-- Gives one lease back, guarded by (id, lock_token) and running: available at once, keeping
-- its place (run_at never moved later than ?3, the database's now), the attempt not counted,
-- the error history ?4 (with a `released` entry when the execution ran), the lease and
-- stuck_since cleared. Returns the queue when released.
UPDATE job_jobs
SET state        = 'available',
    attempt      = attempt - 1,
    run_at       = min(run_at, ?3),
    errors       = ?4,
    lock_token   = NULL,
    locked_until = NULL,
    locked_by    = NULL,
    stuck_since  = NULL
WHERE id = ?1 AND lock_token = ?2 AND state = 'running'
RETURNING queue
