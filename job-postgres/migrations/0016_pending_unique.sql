-- 0016 a pending job holds its unique key. Append-only: change the schema in a new numbered
-- file.
--
-- Migration 0011 added `pending` (a job waiting for its ordering key's turn, migration 0012,
-- or for the jobs it depends on, 0013), but jobs_unique_idx still named only the states
-- before it. So a unique job waiting behind its ordering key did not hold its key: a second
-- job with the key was admitted, and when the first left `pending` the index refused that
-- update, failing the statement that promoted it (the finalize or cancel of the key's head,
-- the rescuer's pass, the stager's) again and again. `pending` is now held like the states
-- around it: a key in scope 'finished' or 'started' is held while its job waits in `pending`.
--
-- Rows admitted by the old index as such duplicates are kept, and keep running: of the jobs
-- of one (kind, unique_key) the new index would hold, the one the old index held (or else the
-- oldest) keeps the key, and the others' scope becomes 'spent' (the key stays on the row for
-- operators, and guards nothing), so that the index can be built.
DO $$
DECLARE
    spent integer;
BEGIN
    WITH held AS (
        SELECT j.id,
               row_number() OVER (PARTITION BY j.kind, j.unique_key
                                  ORDER BY (j.state = 'pending'), j.id) AS n
        FROM job.jobs j
        WHERE j.unique_key IS NOT NULL AND (
            (j.unique_scope = 'finished'
             AND j.state IN ('pending', 'scheduled', 'available', 'running', 'retryable'))
            OR (j.unique_scope = 'started'
                AND j.state IN ('pending', 'scheduled', 'available', 'retryable')))
    )
    UPDATE job.jobs j
    SET unique_scope = 'spent'
    FROM held
    WHERE j.id = held.id AND held.n > 1;
    GET DIAGNOSTICS spent = ROW_COUNT;
    IF spent > 0 THEN
        RAISE WARNING 'job migration 0016: % pending job(s) shared a unique key with another job; their key now guards nothing (unique_scope ''spent'')', spent;
    END IF;
END
$$;

DROP INDEX job.jobs_unique_idx;

-- The one guard of unique jobs (as in migration 0002, with `pending`). Every statement that
-- infers this index must repeat the predicate exactly (job.enqueue_unique below, and
-- sql/redrive.sql's holder check).
CREATE UNIQUE INDEX jobs_unique_idx ON job.jobs (kind, unique_key)
    WHERE unique_key IS NOT NULL AND (
        unique_scope = 'pruned'
        OR (unique_scope = 'finished'
            AND state IN ('pending', 'scheduled', 'available', 'running', 'retryable'))
        OR (unique_scope = 'started'
            AND state IN ('pending', 'scheduled', 'available', 'retryable'))
    );

-- As in migration 0002, inferring the new predicate. A pending holder is reported as the
-- duplicate and never replaced: replacing sets the state, which would let it past what it
-- waits for.
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
                          state           = CASE WHEN j.state = 'retryable' THEN j.state
                                                 ELSE excluded.state END
                -- Only a waiting row is replaced: the lock taken by ON CONFLICT makes this
                -- test see a claim that moved the row to running an instant ago.
                WHERE j.state IN ('scheduled', 'available', 'retryable')
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

-- Takes the advisory locks of the ordering keys `keys` (job.ordering_lock_key, migration 0012),
-- each bucket once, in ascending order; returns how many. A bulk insert calls it before its
-- rows: the insert trigger (job.ordering_admit) takes each row's lock in input order, so two
-- bulk inserts whose keys share buckets in different orders deadlocked. With every lock taken
-- up front in one order, the trigger's own takes are re-entrant and wait for nothing.
CREATE FUNCTION job.ordering_lock_keys(keys text[]) RETURNS integer
LANGUAGE sql
AS $$
    SELECT count(*)::integer
    FROM (SELECT pg_advisory_xact_lock(s.b)
          FROM (SELECT DISTINCT job.ordering_lock_key(k) AS b
                FROM unnest(keys) AS k
                WHERE k IS NOT NULL
                ORDER BY 1
                OFFSET 0) s) l
$$;
