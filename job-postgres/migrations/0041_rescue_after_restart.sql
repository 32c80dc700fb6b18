-- 0041 rescue_after_restart: no lease is rescued in the first 15 seconds of the server's life
-- that expired 15 seconds before its start or later. Append-only: change the schema in a new
-- numbered file.
--
-- A lease that runs out while the server is down was not given up: its holder could not renew
-- it. Every rescuer took such leases the moment the server answered again, before their
-- holders, reconnecting, sent their next heartbeat (at most a third of a lease away). A
-- holder's code that does not stop when fenced (a blocking call, a loop without `.await`)
-- keeps its lease renewed precisely so that no one else runs its job meanwhile; after a
-- restart longer than the lease it ran beside the rescued job's next attempt (seen with a
-- 1-second lease and a 1.6-second restart). Now a holder has 15 seconds from the server's
-- start to renew (a heartbeat renews a lease whose token still matches, however late): a
-- lease renewed by then is not rescued; one whose holder died during the outage is rescued
-- 15 seconds after the start, as any other then. Leases that ran out longer before the start
-- were out while the server still answered: the rescuers had them to take, and take them now.
-- 15 seconds covers the heartbeat period of leases up to 45 seconds (the default lease is 30);
-- a longer lease outlives a restart shorter than two thirds of it, and needs no hold.
--
-- job.server_started_at(): the server's start time (pg_postmaster_start_time), a function of
-- its own so that a test can move it.

CREATE FUNCTION job.server_started_at() RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_postmaster_start_time() $$;

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
        SET state        = CASE WHEN j.attempt >= j.max_attempts AND NOT j.cancel_requested
                                THEN 'discarded' ELSE 'retryable' END::job.job_state,
            finalized_at = CASE WHEN j.attempt >= j.max_attempts AND NOT j.cancel_requested
                                THEN now() END,
            errors       = job.push_error(j.errors, jsonb_build_object(
                               'attempt', j.attempt,
                               'at', now(),
                               'class', 'lease_expired',
                               'message', format('lease of worker %s expired at %s',
                                                 coalesce(j.locked_by, '(unknown)'), j.locked_until))),
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
END
$rescue$;

