-- Applies one outcome, guarded by (id, lock_token) and running: state ?3, run_at ?4, attempt
-- ?5, snoozes increased by ?6 (up to 2147483646, migration 0006's bound), the error history ?7
-- (bounded by the caller), finalized_at ?8, the result ?9 (JSON text, null but for a
-- completion); the lease cleared, and with it stuck_since. Returns the id when applied; no row
-- means the lease was lost.
UPDATE job_jobs
SET state        = ?3,
    run_at       = ?4,
    attempt      = ?5,
    snoozes      = min(snoozes + ?6, 2147483646),
    errors       = ?7,
    finalized_at = ?8,
    result       = ?9,
    lock_token   = NULL,
    locked_until = NULL,
    locked_by    = NULL,
    stuck_since  = NULL
WHERE id = ?1 AND lock_token = ?2 AND state = 'running'
RETURNING id
