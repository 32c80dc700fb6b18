-- Up to ?2 running jobs whose lease expired before ?1 (the database's now, or the rescuer's
-- clock check when earlier: lease.rs), and only those,
-- the longest expired first.
SELECT id, lock_token
FROM job_jobs
WHERE locked_until IS NOT NULL AND state = 'running' AND locked_until < ?1
ORDER BY locked_until
LIMIT ?2
