-- What a guarded write needs of a job whose lease (?1 id, ?2 lock_token) is held, running:
-- no row means the lease was lost.
SELECT attempt, errors, locked_by, locked_until, run_at, cancel_requested
FROM job_jobs
WHERE id = ?1 AND lock_token = ?2 AND state = 'running'
