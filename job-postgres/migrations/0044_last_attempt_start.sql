-- 0044 last_attempt_start: a last attempt is counted by the rescuer only once its handler
-- started. Append-only: change the schema in a new numbered file.
--
-- A claim counts an attempt before the job runs: a worker prefetches jobs, holding their
-- leases while they wait for a slot, and one killed meanwhile (SIGKILL, the OOM killer, a lost
-- machine) leaves them to the rescuer, which counted each as an attempt. On a job's last
-- attempt that made a dead letter of a job that never ran (the chaos review: 1 in 6,000 jobs
-- at retry = 3 with a kill every second).
--
-- Now the worker records the start of a last attempt before any of it runs, its payload's
-- decoding included (sql/record_start.sql: started_lease := the lease's token, guarded by it
-- and by the lease's end), and the rescuer discards an expired last attempt only when its
-- start was recorded under that lease: one that never started goes back to `retryable` with
-- its attempt not counted and, as when a worker gives back a job it did not start
-- (release.sql), no entry in its history: it returns as if never claimed. Other attempts are counted as before (they are retried anyway). A worker of
-- an earlier release records no start: a last attempt of its that dies with it is retried
-- once more, not discarded, while such workers run (at every kill, so a job that kills its
-- worker is retried for as long as earlier workers take it).
--
-- A job claimed `UntilStarted` on its first and only attempt holds its unique key again when
-- that attempt is given back this way, as release.sql gives it back: it never started. A
-- concurrent enqueue may take the key between the statement's snapshot and its write (23505):
-- the function then runs the statement again without giving any key back, as release.sql's
-- caller does.
--
-- started_lease: the token of the lease under which the job's handler last started, where
-- that start was recorded; never cleared (a new claim's token differs from it).

ALTER TABLE job.jobs ADD COLUMN started_lease uuid;

CREATE OR REPLACE FUNCTION job.rescue_expired(in_limit integer)
RETURNS TABLE (retried bigint, discarded bigint, queues_woken bigint)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET enable_bitmapscan = off
SET jit = off
AS $rescue$
#variable_conflict use_column
DECLARE
    give_key_back boolean := true;
BEGIN
  LOOP
   BEGIN
    RETURN QUERY
    WITH RECURSIVE started AS (
        SELECT job.server_started_at() AS at
    ),
    kinds AS (
        (SELECT j.kind FROM job.jobs j
         WHERE j.locked_until IS NOT NULL
         ORDER BY j.kind LIMIT 1)
        UNION ALL
        SELECT (SELECT j.kind FROM job.jobs j
                WHERE j.locked_until IS NOT NULL AND j.kind > k.kind
                ORDER BY j.kind LIMIT 1)
        FROM kinds k
        WHERE k.kind IS NOT NULL
    ),
    expired AS (
        SELECT e.id
        FROM kinds k
        CROSS JOIN started
        CROSS JOIN LATERAL (
            SELECT j.id
            FROM job.jobs j
            WHERE j.kind = k.kind AND j.locked_until < now() AND j.state = 'running'
              -- Held while the server is new: see the head of migration 0041.
              AND NOT (j.locked_until > started.at - interval '15 seconds'
                       AND now() < started.at + interval '15 seconds')
            ORDER BY j.locked_until
            LIMIT in_limit
            FOR NO KEY UPDATE SKIP LOCKED
        ) e
        WHERE k.kind IS NOT NULL
        LIMIT in_limit
    ),
    rescued AS (
        UPDATE job.jobs j
        -- A job whose cancel was requested is never discarded here: retryable, it is ended
        -- `cancelled` by the expirer (job.expire), whatever attempts it has left.
        -- A last attempt whose start was not recorded (started_lease is another lease's
        -- token, or none) never ran its handler: it is not counted, and the job is retried.
        SET state        = CASE WHEN j.attempt >= j.max_attempts AND NOT j.cancel_requested
                                     AND j.started_lease IS NOT DISTINCT FROM j.lock_token
                                THEN 'discarded' ELSE 'retryable' END::job.job_state,
            finalized_at = CASE WHEN j.attempt >= j.max_attempts AND NOT j.cancel_requested
                                     AND j.started_lease IS NOT DISTINCT FROM j.lock_token
                                THEN now() END,
            attempt      = CASE WHEN j.attempt >= j.max_attempts
                                     AND j.started_lease IS DISTINCT FROM j.lock_token
                                THEN j.attempt - 1 ELSE j.attempt END,
            -- Given back as a release of an unstarted job is: no entry (the job returns as
            -- if never claimed, and job_rescued_total counts it as retried).
            errors       = CASE WHEN j.attempt >= j.max_attempts
                                     AND j.started_lease IS DISTINCT FROM j.lock_token
                                THEN j.errors
                                ELSE job.push_error(j.errors, jsonb_build_object(
                                    'attempt', j.attempt,
                                    'at', now(),
                                    'class', 'lease_expired',
                                    'message', format('lease of worker %s expired at %s',
                                                      coalesce(j.locked_by, '(unknown)'),
                                                      j.locked_until))) END,
            -- An `UntilStarted` key spent by the claim of a first attempt that never started
            -- is held again, unless another job took it meanwhile (release.sql's rule).
            unique_scope = CASE WHEN give_key_back
                                     AND j.attempt >= j.max_attempts
                                     AND j.started_lease IS DISTINCT FROM j.lock_token
                                     AND j.attempt = 1 AND j.snoozes = 0
                                     AND j.errors = '[]'::jsonb
                                     AND j.unique_scope = 'spent' AND j.unique_key IS NOT NULL
                                     AND NOT EXISTS (
                                         SELECT 1 FROM job.jobs a
                                         WHERE a.kind = j.kind AND a.unique_key = j.unique_key
                                           AND a.id <> j.id AND (
                                               a.unique_scope = 'pruned'
                                               OR (a.unique_scope = 'finished'
                                                   AND a.state IN ('pending', 'scheduled',
                                                                   'available', 'running',
                                                                   'retryable'))
                                               OR (a.unique_scope = 'started'
                                                   AND a.state IN ('pending', 'scheduled',
                                                                   'available', 'retryable'))))
                                THEN 'started' ELSE j.unique_scope END,
            lock_token   = NULL,
            locked_until = NULL,
            locked_by    = NULL,
            stuck_since  = NULL
        -- By primary key: joined, the rows could be matched by a scan of every running row.
        WHERE j.id = ANY (ARRAY(SELECT expired.id FROM expired))
          AND j.state = 'running' AND j.locked_until < now()
        RETURNING j.state, j.queue
    ),
    woken AS (
        SELECT pg_notify('job_insert', q.queue)
        FROM (SELECT DISTINCT queue FROM rescued WHERE state = 'retryable') q
    )
    SELECT count(*) FILTER (WHERE state = 'retryable') AS retried,
           count(*) FILTER (WHERE state = 'discarded') AS discarded,
           (SELECT count(*) FROM woken) AS queues_woken
    FROM rescued;
    RETURN;
   EXCEPTION WHEN unique_violation THEN
    -- A concurrent enqueue took a key this statement gave back (see the head): once more,
    -- giving none back.
    IF NOT give_key_back THEN
        RAISE;
    END IF;
    give_key_back := false;
   END;
  END LOOP;
END
$rescue$;

