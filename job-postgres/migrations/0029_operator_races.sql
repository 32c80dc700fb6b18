-- 0029 operator races: three ways an operator's action, or a replace, could leave a job waiting
-- for ever or skipping what it should do, and the pruner's index of cancelled jobs (4, at the
-- end). Append-only: change the schema in a new numbered file.
--
-- 1. The promotion of an ordering key's next job gave up when its pick had just been taken
--    from `pending` by someone else. The cancel of a pending job (or its purge, or a raw write)
--    does not take the key's lock: it could lock the row the promotion picked, and commit after
--    the promotion read it. The promotion's guarded UPDATE then found no pending row, returned
--    false, and nothing else would ever wake the key (no head left it, and the key was not on
--    the wake-up list): the key's other pending jobs waited until a new job of the key came.
--    It now takes the next pending job instead, until one is promoted or none is left.
--
-- 2. `on_duplicate => 'replace'` replaced the payload of a waiting duplicate that had already
--    recorded durable steps in an earlier attempt, or whose cancel was requested. The steps
--    belong to the old payload: the next attempt was handed their recorded outputs instead of
--    running them for the new one (a charge of 999 answered with the receipt of the charge of
--    100), and the cancel then cancelled the new payload. Such a duplicate is not replaced: it
--    is reported, as a running one is ('duplicate', with its id).
--
-- 3. The rescuer discarded an expired lease on its last attempt even when the job's cancel had
--    been requested: it became a dead letter (firing its compensation and failing the jobs
--    that depend on it) instead of ending cancelled, and a later redrive ran the job the
--    operator had cancelled. It now becomes `retryable`, as it does with attempts left, and the
--    expirer ends it `cancelled` on its next pass (the claim never takes a job whose cancel was
--    requested). It counts among the retried.

-- (CREATE OR REPLACE sets the function's settings anew: jit stays off, as migration 0024 set.)
CREATE OR REPLACE FUNCTION job.ordering_promote(key text) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    next record;
BEGIN
    IF EXISTS (SELECT 1 FROM job.jobs h
               WHERE h.ordering_key = key
                 AND h.state IN ('scheduled', 'available', 'running', 'retryable')) THEN
        RETURN false;
    END IF;
    LOOP
        -- A fresh snapshot each time round (READ COMMITTED): the row a miss waited for is seen
        -- as it ended.
        SELECT p.id, p.queue, p.run_at INTO next
        FROM job.jobs p
        WHERE p.ordering_key = key AND p.state = 'pending'
          AND NOT EXISTS (SELECT 1 FROM job.dependencies d
                          WHERE d.job_id = p.id AND NOT d.resolved)
        ORDER BY p.id
        LIMIT 1;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
        -- A pending row is written only under the key's lock, which the caller holds, or by an
        -- operator's cancel or purge (or a raw write): the guard skips a row that one of those
        -- just took from `pending`, and the next one is tried. Each miss is a row that left
        -- `pending` for good, so the loop ends.
        UPDATE job.jobs
        SET state = CASE WHEN next.run_at > now() THEN 'scheduled'
                         ELSE 'available' END::job.job_state
        WHERE id = next.id AND state = 'pending';
        EXIT WHEN FOUND;
    END LOOP;
    IF next.run_at <= now() THEN
        PERFORM pg_notify('job_insert', next.queue);
    END IF;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION job.enqueue_unique(
    p_kind            text,
    p_queue           text,
    p_priority        smallint,
    p_payload         jsonb,
    p_payload_version integer,
    p_max_attempts    integer,
    p_run_at          timestamptz,
    p_deadline        timestamptz,
    p_unique_key      text,
    p_unique_scope    text,
    p_replace         boolean,
    p_tags            text[],
    p_tenant          text,
    OUT id            bigint,
    OUT outcome       text
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_state job.job_state := CASE WHEN p_run_at > now() THEN 'scheduled' ELSE 'available' END;
BEGIN
    IF p_unique_scope IS NULL OR p_unique_scope NOT IN ('finished', 'started', 'pruned') THEN
        RAISE EXCEPTION 'invalid enqueue argument `p_unique_scope`: must be ''finished'', '
                        '''started'' or ''pruned'', got %',
                coalesce(quote_literal(p_unique_scope), 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR i IN 1..100 LOOP
        IF p_replace THEN
            INSERT INTO job.jobs AS j (kind, queue, priority, payload, payload_version,
                                       max_attempts, run_at, state, deadline, unique_key,
                                       unique_scope, tags, tenant)
            VALUES (p_kind, p_queue, p_priority, p_payload, p_payload_version, p_max_attempts,
                    p_run_at, v_state, p_deadline, p_unique_key, p_unique_scope, p_tags,
                    p_tenant)
            ON CONFLICT (kind, unique_key)
                WHERE unique_key IS NOT NULL AND (
                    unique_scope = 'pruned'
                    OR (unique_scope = 'finished'
                        AND state IN ('pending', 'scheduled', 'available', 'running', 'retryable'))
                    OR (unique_scope = 'started'
                        AND state IN ('pending', 'scheduled', 'available', 'retryable')))
            DO UPDATE SET payload         = excluded.payload,
                          payload_version = excluded.payload_version,
                          run_at          = excluded.run_at,
                          deadline        = excluded.deadline,
                          state           = CASE WHEN j.state IN ('retryable', 'pending')
                                                 THEN j.state ELSE excluded.state END
                -- Only a waiting row is replaced: the lock taken by ON CONFLICT makes this
                -- test see a claim that moved the row to running an instant ago. A row
                -- pending behind its ordering key stays pending, in its place. A row with
                -- recorded steps (of its old payload) or a requested cancel is reported as
                -- the duplicate (a running one records steps only under its lease, which a
                -- waiting row does not have).
                WHERE j.state IN ('pending', 'scheduled', 'available', 'retryable')
                  AND NOT j.cancel_requested
                  AND NOT EXISTS (SELECT 1 FROM job.steps s WHERE s.job_id = j.id)
            RETURNING j.id, CASE WHEN j.xmax = 0 THEN 'inserted' ELSE 'replaced' END
            INTO enqueue_unique.id, enqueue_unique.outcome;
        ELSE
            INSERT INTO job.jobs (kind, queue, priority, payload, payload_version,
                                  max_attempts, run_at, state, deadline, unique_key,
                                  unique_scope, tags, tenant)
            VALUES (p_kind, p_queue, p_priority, p_payload, p_payload_version, p_max_attempts,
                    p_run_at, v_state, p_deadline, p_unique_key, p_unique_scope, p_tags,
                    p_tenant)
            ON CONFLICT (kind, unique_key)
                WHERE unique_key IS NOT NULL AND (
                    unique_scope = 'pruned'
                    OR (unique_scope = 'finished'
                        AND state IN ('pending', 'scheduled', 'available', 'running', 'retryable'))
                    OR (unique_scope = 'started'
                        AND state IN ('pending', 'scheduled', 'available', 'retryable')))
            DO NOTHING
            RETURNING job.jobs.id, 'inserted' INTO enqueue_unique.id, enqueue_unique.outcome;
        END IF;
        IF enqueue_unique.id IS NOT NULL THEN
            RETURN;
        END IF;
        -- A duplicate holds the key: read it with this statement's fresh snapshot.
        SELECT j.id, 'duplicate' INTO enqueue_unique.id, enqueue_unique.outcome
        FROM job.jobs j
        WHERE j.kind = p_kind AND j.unique_key = p_unique_key AND (
            j.unique_scope = 'pruned'
            OR (j.unique_scope = 'finished'
                AND j.state IN ('pending', 'scheduled', 'available', 'running', 'retryable'))
            OR (j.unique_scope = 'started'
                AND j.state IN ('pending', 'scheduled', 'available', 'retryable')));
        IF enqueue_unique.id IS NOT NULL THEN
            RETURN;
        END IF;
        -- The duplicate finished between the insert and the read: try again.
    END LOOP;
    RAISE EXCEPTION 'enqueue of `%` with unique key % kept racing a finishing duplicate',
        p_kind, quote_literal(p_unique_key);
END
$$;

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
    WITH RECURSIVE kinds AS (
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
        CROSS JOIN LATERAL (
            SELECT j.id
            FROM job.jobs j
            WHERE j.kind = k.kind AND j.locked_until < now() AND j.state = 'running'
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

-- 4. The pruner keeps a job cancelled before its run time until that time has passed by the
--    retention (prune.sql: a periodic period cancelled ahead keeps its unique key until then).
--    Read through jobs_cancelled_idx (finalized_at), such rows would be walked by every pass
--    and deleted by none (55 ms a pass with 200,000 of them); the pruner reads them in the
--    order of the later of the two times instead. Only cancelled rows are in it, and a cancel
--    is rare; building it reads the table once (in this migration's transaction, where CREATE
--    INDEX CONCURRENTLY cannot run: on a large table, apply it when writes can wait that long).
CREATE INDEX jobs_cancelled_prune_idx ON job.jobs (greatest(finalized_at, run_at))
    WHERE state = 'cancelled';
