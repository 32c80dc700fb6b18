-- Inserts one job with a unique key or, when an active job holds the key and is waiting,
-- replaces its payload, run time and deadline (a retryable job stays retryable). A running
-- holder is left alone and no row comes back, and so is a waiting holder with recorded steps
-- (of its old payload: the next attempt would be handed their outputs instead of running them
-- for the new one) or a requested cancel. The conflict target repeats
-- job_jobs_unique_idx's predicate exactly.
-- ?1 kind, ?2 queue, ?3 priority, ?4 payload (JSON text), ?5 payload_version, ?6 max_attempts,
-- ?7 run_at (null: the database's now plus ?8 microseconds), ?9 deadline (null: now plus ?10
-- microseconds, or none when ?10 is null too), ?11 tags (a JSON array), ?12 tenant,
-- ?13 unique_key, ?14 unique_scope. A job due later starts `scheduled`, one due now
-- `available`. Now is read inside the statement, so that it is the insert's first read and
-- a caller's transaction can take the write lock with it.
WITH t AS (SELECT CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000 AS now),
r AS (SELECT now, coalesce(?7, now + ?8) AS run_at, coalesce(?9, now + ?10) AS deadline FROM t)
INSERT INTO job_jobs AS j (kind, queue, priority, payload, payload_version, max_attempts,
                      run_at, state, deadline, tags, tenant, unique_key, unique_scope,
                      created_at)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, r.run_at,
       CASE WHEN r.run_at > r.now THEN 'scheduled' ELSE 'available' END,
       r.deadline, ?11, ?12, ?13, ?14, r.now
FROM r
WHERE true
ON CONFLICT (kind, unique_key)
    WHERE unique_key IS NOT NULL AND (
        unique_scope = 'pruned'
        OR (unique_scope = 'finished'
            AND state IN ('scheduled', 'available', 'running', 'retryable'))
        OR (unique_scope = 'started'
            AND state IN ('scheduled', 'available', 'retryable')))
DO UPDATE SET payload         = excluded.payload,
              payload_version = excluded.payload_version,
              run_at          = excluded.run_at,
              deadline        = excluded.deadline,
              state           = CASE WHEN j.state = 'retryable' THEN j.state
                                     ELSE excluded.state END
    WHERE j.state IN ('scheduled', 'available', 'retryable')
      AND NOT j.cancel_requested
      AND NOT EXISTS (SELECT 1 FROM job_steps s WHERE s.job_id = j.id)
RETURNING id
