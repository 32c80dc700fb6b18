-- Renews one lease, guarded by (id, lock_token) and running: locked_until becomes ?3 (the
-- database's now plus the lease) unless it is later already (a renewal never moves a lease's
-- end back), and stuck_since records since when (?5, now) the worker
-- reports the execution stuck (?4), kept while it stays stuck, cleared when not. Returns
-- cancel_requested; no row means the lease was lost.
UPDATE job_jobs
SET locked_until = max(locked_until, ?3),
    stuck_since  = CASE WHEN ?4 THEN coalesce(stuck_since, ?5) END
WHERE id = ?1 AND lock_token = ?2 AND state = 'running'
RETURNING cancel_requested
