-- Completes one job inside the caller's transaction, guarded by (id, lock_token) and running,
-- exactly as finalize.sql completes it: completed, finalized_at the database's now, the lease
-- cleared, the result ?3 (JSON text or null). Returns the id when applied; no row means the lease was lost.
UPDATE job_jobs
SET state        = 'completed',
    finalized_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000,
    result       = ?3,
    lock_token   = NULL,
    locked_until = NULL,
    locked_by    = NULL,
    stuck_since  = NULL
WHERE id = ?1 AND lock_token = ?2 AND state = 'running'
RETURNING id
