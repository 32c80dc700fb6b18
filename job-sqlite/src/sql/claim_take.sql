-- Claims job ?1 for worker ?2: running, one more attempt, a fresh lease token ?3, the lease
-- until ?4 (the database's now plus the kind's lease). A unique key held 'started' is spent.
UPDATE job_jobs
SET state        = 'running',
    attempt      = attempt + 1,
    lock_token   = ?3,
    locked_by    = ?2,
    locked_until = ?4,
    unique_scope = CASE WHEN unique_scope = 'started' THEN 'spent' ELSE unique_scope END
WHERE id = ?1 AND state IN ('available', 'scheduled', 'retryable')
RETURNING id, lock_token, kind, queue, priority, payload, payload_version, attempt,
          max_attempts, snoozes, run_at
