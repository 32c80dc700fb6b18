-- Cancels job ?1 unless it has finished: a waiting job becomes cancelled at once (finalized at
-- ?2, the history ?3 with a `cancelled` entry); a running one keeps running with
-- cancel_requested set, which its worker's next heartbeat turns into the handler's cancel
-- signal. Returns the state after the update; no row when the job is finished or absent.
UPDATE job_jobs
SET state            = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
    cancel_requested = 1,
    finalized_at     = CASE WHEN state = 'running' THEN NULL ELSE ?2 END,
    errors           = CASE WHEN state = 'running' THEN errors ELSE ?3 END
WHERE id = ?1 AND state NOT IN ('completed', 'cancelled', 'discarded')
RETURNING state
