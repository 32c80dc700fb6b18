-- Up to ?2 running jobs whose lease expired before ?1 (the database's now, or the rescuer's
-- clock check when earlier: lease.rs), and only those, the longest expired first, but those of
-- ?3 (a JSON array of ids: rows the database refused to write in an earlier pass, store.rs
-- `RefusedRows`).
SELECT id, lock_token
FROM job_jobs
WHERE locked_until IS NOT NULL AND state = 'running' AND locked_until < ?1
  AND id NOT IN (SELECT value FROM json_each(?3))
ORDER BY locked_until
LIMIT ?2
