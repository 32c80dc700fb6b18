-- 0054 rescue_limit: job.rescue_expired names the count it refuses. Append-only: change the
-- schema in a new numbered file.
--
-- Migration 0052 made job.ordering_wake_up and job.dependencies_resolve refuse a negative or
-- NULL count, naming it; job.rescue_expired was left as it was. Called with -1 it answered
-- zeros while no lease had expired and failed with "LIMIT must not be negative" once one
-- had, and with NULL it rescued every expired lease at once (LIMIT NULL is no limit), in one
-- statement, however large the backlog. It now refuses both with 22023 naming `in_limit`, in
-- the other two functions' words. No upper bound: the rescuer sends its batch (a u32 capped
-- at 2,147,483,647), and a large count only stops at the work there is. The rescuer itself
-- never sends either (Store::rescue_expired takes a u32).
--
-- As in migration 0048, with that check first. CREATE OR REPLACE keeps the function's owner
-- and grants (executable by PUBLIC; SECURITY INVOKER) and sets its settings anew.

CREATE OR REPLACE FUNCTION job.rescue_expired(in_limit integer)
RETURNS TABLE (retried bigint, discarded bigint, queues_woken bigint, jobs bigint[],
               kinds text[], workers text[], states text[])
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
  IF in_limit IS NULL OR in_limit < 0 THEN
    RAISE EXCEPTION 'invalid rescue_expired argument `in_limit`: must be 0 or more '
                    '(the most jobs to rescue), got %', coalesce(in_limit::text, 'null')
        USING ERRCODE = 'invalid_parameter_value';
  END IF;
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
        SELECT e.id, e.locked_by
        FROM kinds k
        CROSS JOIN started
        CROSS JOIN LATERAL (
            SELECT j.id, j.locked_by
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
        RETURNING j.id, j.kind, j.state, j.queue
    ),
    woken AS (
        SELECT pg_notify('job_insert', q.queue)
        FROM (SELECT DISTINCT queue FROM rescued WHERE state = 'retryable') q
    )
    -- The worker is read from `expired`: the row the UPDATE returns has its lease cleared.
    -- Both read the same locked row, so the name is the one whose lease expired.
    SELECT count(*) FILTER (WHERE r.state = 'retryable') AS retried,
           count(*) FILTER (WHERE r.state = 'discarded') AS discarded,
           (SELECT count(*) FROM woken) AS queues_woken,
           coalesce(array_agg(r.id ORDER BY r.id), '{}') AS jobs,
           coalesce(array_agg(r.kind ORDER BY r.id), '{}') AS kinds,
           coalesce(array_agg(e.locked_by ORDER BY r.id), '{}') AS workers,
           coalesce(array_agg(r.state::text ORDER BY r.id), '{}') AS states
    FROM rescued r
    JOIN expired e ON e.id = r.id;
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
