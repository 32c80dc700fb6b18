-- Ends waiting job ?1 that must not run: cancelled when its cancellation was requested, else
-- discarded (past its deadline), finalized at ?2 with the error history ?3.
UPDATE job_jobs
SET state        = CASE WHEN cancel_requested = 1 THEN 'cancelled' ELSE 'discarded' END,
    finalized_at = ?2,
    errors       = ?3
WHERE id = ?1 AND state IN ('available', 'scheduled', 'retryable')
RETURNING state
