-- Puts dead letter ?1 back to available with fresh attempts (attempt 0, snoozes 0,
-- interruptions 0, due at ?2, no deadline, cancellation cleared; errors kept). A key spent by
-- a start is held 'started' again. Returns its queue; no row when it is no longer a dead
-- letter.
UPDATE job_jobs
SET state            = 'available',
    attempt          = 0,
    snoozes          = 0,
    interruptions    = 0,
    run_at           = ?2,
    deadline         = NULL,
    finalized_at     = NULL,
    cancel_requested = 0,
    unique_scope     = CASE WHEN unique_scope = 'spent' THEN 'started' ELSE unique_scope END
WHERE id = ?1 AND state = 'discarded'
RETURNING queue
