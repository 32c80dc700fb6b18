-- Completes many jobs in one statement, each guarded by (id, lock_token) and running, as
-- finalize.sql does one: ?1 is finalized_at (the database's now), ?2 a JSON array of objects
-- {"id", "token" (the lease token as 32 hex digits), "result" (the job's result as JSON text,
-- or null)}. The lease is cleared, and with it stuck_since; run_at, attempt, snoozes and the
-- error history are kept. Returns the ids applied: an id not returned lost its lease. Each
-- row is reached by its primary key, the batch being the outer loop.
UPDATE job_jobs
SET state        = 'completed',
    finalized_at = ?1,
    result       = u.result,
    lock_token   = NULL,
    locked_until = NULL,
    locked_by    = NULL,
    stuck_since  = NULL
FROM (SELECT value ->> '$.id' AS id, unhex(value ->> '$.token') AS token,
             value ->> '$.result' AS result
      FROM json_each(?2)) AS u
WHERE job_jobs.id = u.id AND job_jobs.lock_token = u.token AND job_jobs.state = 'running'
RETURNING id
