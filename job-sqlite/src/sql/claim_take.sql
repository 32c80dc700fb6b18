-- Claims the jobs picked by claim_pick.sql in one statement, for worker ?1: ?2 is a JSON array
-- of objects {"id", "token" (a fresh lease token as 32 hex digits), "until" (the database's
-- now plus the kind's lease, in microseconds)}. Each becomes running with one more attempt,
-- its token and its lease; a unique key held 'started' is spent. A row no longer waiting is
-- left as it is (and not returned). Each row is reached by its primary key, the batch being
-- the outer loop; rows come back in no particular order.
UPDATE job_jobs
SET state        = 'running',
    attempt      = attempt + 1,
    lock_token   = unhex(u.token),
    locked_by    = ?1,
    locked_until = u.until,
    unique_scope = CASE WHEN unique_scope = 'started' THEN 'spent' ELSE unique_scope END
FROM (SELECT value ->> '$.id' AS id, value ->> '$.token' AS token,
             value ->> '$.until' AS until
      FROM json_each(?2)) AS u
WHERE job_jobs.id = u.id AND job_jobs.state IN ('available', 'scheduled', 'retryable')
RETURNING id, lock_token, kind, queue, priority, payload, payload_version, attempt,
          max_attempts, snoozes, run_at
