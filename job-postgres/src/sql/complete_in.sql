-- Completes one job inside the caller's transaction, guarded by (id, lock_token) and running,
-- exactly as finalize.sql completes it: `completed`, finalized_at set, the lease cleared. The
-- caller's commit makes it and the caller's own rows durable together; a rollback undoes both.
-- $3: the job's result as JSON text, or null. Returns the id when applied; no row means the
-- lease was lost.
UPDATE job.jobs
SET state        = 'completed',
    finalized_at = now(),
    result       = $3::jsonb,
    lock_token   = NULL,
    locked_until = NULL,
    locked_by    = NULL,
    stuck_since  = NULL
WHERE id = $1 AND lock_token = $2 AND state = 'running'
RETURNING id
