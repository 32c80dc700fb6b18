-- 0052 door_arguments: the SQL functions name the argument they refuse. Append-only: change the
-- schema in a new numbered file.
--
-- An audit called every public function of the schema with NULLs, empty and huge texts, wrong
-- JSON types, extreme integers and infinite times. Each was refused or stored harmlessly, but
-- some refusals named a table's constraint, or said nothing of the argument:
--
-- - job.enqueue_unique (the Rust producer's function, granted to the worker's role) checked
--   only its scope: a NULL kind, queue, payload, priority, run time, key or tags was refused by
--   the table (`null value in column "run_at"`, `jobs_unique_scope_check`, `job row refused`),
--   with the row in the error's detail, and a NULL p_replace was taken as false. It now
--   refuses a NULL argument (all but p_deadline and p_tenant, which may be NULL), a priority,
--   attempts, version, run time, deadline, tags' bound or scope job.enqueue refuses, with
--   22023 naming the argument (`p_run_at`, `p_unique_key`, ...) as it named `p_unique_scope`
--   and in job.enqueue's words (job.enqueue_problem), as it does a key not of 1 to 512 bytes;
--   first as one expression of comparisons, the reason only when that fails. A kind, queue,
--   tenant, payload or tag that breaks the name and payload rules is still refused by the
--   table's admission trigger (23514 naming the column, in the same words), as before:
--   checking them here would cost every enqueue a second pass over the payload. The scope it
--   refuses is now shown through job.shown (at most 40 characters), as job.enqueue's has been
--   since migration 0042.
-- - Tags indexed from another number than 1 (`'[5:5]={a}'::text[]`, which only a literal
--   written so makes) passed job.enqueue's checks and were refused by jobs_tags_check (23514,
--   the row in the detail). job.enqueue and job.enqueue_unique refuse them with 22023 naming
--   the tags (job.enqueue_problem's new rule). They are refused rather than renumbered, as a
--   raw INSERT refuses them and as a two-dimensional array is refused rather than flattened.
--   job.enqueue_many builds its tags from JSON, always indexed from 1.
-- - job.ordering_wake_up(-1) and job.dependencies_resolve(-1) failed with "LIMIT must not be
--   negative", and NULL meant no limit. Both refuse a negative or NULL count, naming it. No
--   upper bound: the stager sends its batch (a u32, up to 2,147,483,647) and a large count only
--   stops at the work there is.
--
-- job.enqueue_many keeps taking any number of jobs in its one statement (an audit's 100,001
-- were inserted; a million took a minute here), as Store::enqueue_many takes any number in its
-- one transaction: a bound would refuse, after an upgrade, calls that worked before it. The
-- call is bounded by jsonb (255 MB) and by the caller's statement_timeout.
--
-- job.enqueue's quick test gains one comparison (the tags' lower bound), and
-- job.enqueue_unique's a dozen: about 0.2 microseconds a call. CREATE OR REPLACE keeps each
-- function's owner and grants, and sets its settings anew: they are written out as before
-- (SECURITY DEFINER, search_path, jit = off).

CREATE OR REPLACE FUNCTION job.enqueue_problem(
    kind            text,
    payload         jsonb,
    queue           text,
    priority        integer,
    max_attempts    integer,
    run_at          timestamptz,
    payload_version integer,
    unique_key      text,
    unique_scope    text,
    on_duplicate    text,
    tags            text[],
    tenant          text,
    deadline        timestamptz,
    OUT argument    text,
    OUT problem     text
)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT x.arg, x.problem
    FROM (
        SELECT 0 AS ord, a."column" AS arg, a.problem
        FROM job.admission_problem(kind, queue, payload, tags, tenant, unique_key) a
        UNION ALL
        SELECT 1, 'tags', CASE WHEN cardinality(tags) > 0 AND array_lower(tags, 1) <> 1
            THEN format('must be indexed from 1 (as ARRAY[...] and ''{...}'' are), got an '
                        'array indexed from %s', array_lower(tags, 1))
        END
        UNION ALL
        SELECT 2, 'priority', CASE WHEN priority IS NULL OR priority NOT BETWEEN 0 AND 32767
            THEN format('must be between 0 and 32767, got %s', coalesce(priority::text, 'null'))
        END
        UNION ALL
        SELECT 3, 'max_attempts', CASE WHEN max_attempts IS NULL OR max_attempts < 1
            THEN format('must be at least 1, got %s', coalesce(max_attempts::text, 'null'))
        END
        UNION ALL
        SELECT 4, 'payload_version', CASE WHEN payload_version IS NULL OR payload_version < 1
            THEN format('must be at least 1, got %s', coalesce(payload_version::text, 'null'))
        END
        UNION ALL
        SELECT 5, 'run_at', job.time_problem(run_at, false)
        UNION ALL
        SELECT 6, 'deadline', job.time_problem(deadline, true)
        UNION ALL
        SELECT 7, 'unique_scope', CASE
            WHEN unique_scope IS NULL OR unique_scope NOT IN ('finished', 'started', 'pruned')
            THEN format('must be ''finished'', ''started'' or ''pruned'', got %s',
                        coalesce(quote_literal(job.shown(unique_scope)), 'null'))
        END
        UNION ALL
        SELECT 8, 'on_duplicate', CASE
            WHEN on_duplicate IS NULL OR on_duplicate NOT IN ('error', 'existing', 'replace')
            THEN format('must be ''error'', ''existing'' or ''replace'', got %s',
                        coalesce(quote_literal(job.shown(on_duplicate)), 'null'))
        END
    ) x
    WHERE x.problem IS NOT NULL
    ORDER BY x.ord
    LIMIT 1
$$;

-- As in migration 0020, with the tags' lower bound in the quick test.
CREATE OR REPLACE FUNCTION job.enqueue(
    kind            text,
    payload         jsonb,
    queue           text        DEFAULT 'default',
    priority        integer     DEFAULT 0,
    max_attempts    integer     DEFAULT 25,
    run_at          timestamptz DEFAULT now(),
    payload_version integer     DEFAULT 1,
    unique_key      text        DEFAULT NULL,
    unique_scope    text        DEFAULT 'finished',
    on_duplicate    text        DEFAULT 'error',
    tags            text[]      DEFAULT '{}',
    tenant          text        DEFAULT NULL,
    deadline        timestamptz DEFAULT NULL,
    ordering_key    text        DEFAULT NULL,
    rate_key        text        DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad     record;
    new_id  bigint;
    outcome text;
BEGIN
    -- The quick test first (one expression, no query); the reason only when it fails.
    IF (job.quickly_admissible(enqueue.kind, enqueue.queue, enqueue.payload, enqueue.tags,
                               enqueue.tenant, enqueue.unique_key)
        AND (cardinality(enqueue.tags) = 0 OR array_lower(enqueue.tags, 1) = 1)
        AND enqueue.priority BETWEEN 0 AND 32767
        AND enqueue.max_attempts >= 1
        AND enqueue.payload_version >= 1
        AND enqueue.run_at >= '0001-01-01 00:00:00+00' AND enqueue.run_at < '10000-01-01 00:00:00+00'
        AND (enqueue.deadline IS NULL
             OR (enqueue.deadline >= '0001-01-01 00:00:00+00'
                 AND enqueue.deadline < '10000-01-01 00:00:00+00'))
        AND enqueue.unique_scope IN ('finished', 'started', 'pruned')
        AND enqueue.on_duplicate IN ('error', 'existing', 'replace')) IS NOT TRUE
    THEN
        SELECT * INTO bad
        FROM job.enqueue_problem(enqueue.kind, enqueue.payload, enqueue.queue,
                                 enqueue.priority, enqueue.max_attempts, enqueue.run_at,
                                 enqueue.payload_version, enqueue.unique_key,
                                 enqueue.unique_scope, enqueue.on_duplicate, enqueue.tags,
                                 enqueue.tenant, enqueue.deadline);
        IF FOUND THEN
            RAISE EXCEPTION 'invalid enqueue argument `%`: %', bad.argument, bad.problem
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF octet_length(enqueue.ordering_key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'invalid enqueue argument `ordering_key`: must be 1 to 512 bytes, got %',
                octet_length(enqueue.ordering_key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(enqueue.rate_key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'invalid enqueue argument `rate_key`: must be 1 to 512 bytes, got %',
                octet_length(enqueue.rate_key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    IF enqueue.unique_key IS NULL THEN
        INSERT INTO job.jobs (kind, queue, priority, payload, payload_version, max_attempts,
                              run_at, state, deadline, tags, tenant, ordering_key, rate_key)
        VALUES (enqueue.kind, enqueue.queue, enqueue.priority::smallint, enqueue.payload,
                enqueue.payload_version, enqueue.max_attempts, enqueue.run_at,
                CASE WHEN enqueue.run_at > now() THEN 'scheduled'
                     ELSE 'available' END::job.job_state,
                enqueue.deadline, enqueue.tags, enqueue.tenant, enqueue.ordering_key,
                enqueue.rate_key)
        RETURNING id INTO new_id;
        RETURN new_id;
    END IF;

    SELECT u.id, u.outcome INTO new_id, outcome
    FROM job.enqueue_unique(enqueue.kind, enqueue.queue, enqueue.priority::smallint,
                            enqueue.payload, enqueue.payload_version, enqueue.max_attempts,
                            enqueue.run_at, enqueue.deadline, enqueue.unique_key,
                            enqueue.unique_scope, enqueue.on_duplicate = 'replace',
                            enqueue.tags, enqueue.tenant) u;
    -- The keys go on the row inserted, as sql/enqueue_unique.sql does: the admit trigger makes
    -- it pending when its ordering key is taken.
    IF outcome = 'inserted' AND enqueue.ordering_key IS NOT NULL THEN
        PERFORM job.set_ordering_key(new_id, enqueue.ordering_key);
    END IF;
    IF outcome = 'inserted' AND enqueue.rate_key IS NOT NULL THEN
        PERFORM job.set_rate_key(new_id, enqueue.rate_key);
    END IF;
    IF outcome = 'duplicate' AND enqueue.on_duplicate <> 'existing' THEN
        RAISE EXCEPTION 'a job of `%` with unique key `%` is already active (job %)',
                enqueue.kind, enqueue.unique_key, new_id
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'jobs_unique_idx',
                  DETAIL = format('existing job: %s', new_id),
                  HINT = 'on_duplicate => ''existing'' returns its id instead';
    END IF;
    RETURN new_id;
END
$$;

-- As in migration 0029, with its arguments checked first: job.enqueue's checks, named as the
-- function's parameters, and a key and p_replace that are not NULL.
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
    bad     record;
BEGIN
    -- The quick test first (comparisons only, no query); the reason only when it fails. The
    -- name, payload and tag rules are left to the table's admission trigger, which runs them
    -- on the insert below (23514 naming the column): run here too, they would cost every
    -- enqueue a second pass over the payload's text.
    IF (p_kind IS NOT NULL AND p_queue IS NOT NULL AND p_payload IS NOT NULL
        AND octet_length(p_unique_key) BETWEEN 1 AND 512
        AND (cardinality(p_tags) = 0 OR array_lower(p_tags, 1) = 1)
        AND p_priority >= 0
        AND p_max_attempts >= 1
        AND p_payload_version >= 1
        AND p_run_at >= '0001-01-01 00:00:00+00' AND p_run_at < '10000-01-01 00:00:00+00'
        AND (p_deadline IS NULL
             OR (p_deadline >= '0001-01-01 00:00:00+00'
                 AND p_deadline < '10000-01-01 00:00:00+00'))
        AND p_unique_scope IN ('finished', 'started', 'pruned')
        AND p_replace IS NOT NULL) IS NOT TRUE
    THEN
        SELECT * INTO bad
        FROM job.enqueue_problem(p_kind, p_payload, p_queue, p_priority, p_max_attempts,
                                 p_run_at, p_payload_version, p_unique_key, p_unique_scope,
                                 'error', p_tags, p_tenant, p_deadline);
        IF FOUND THEN
            RAISE EXCEPTION 'invalid enqueue argument `p_%`: %', bad.argument, bad.problem
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF p_unique_key IS NULL THEN
            RAISE EXCEPTION 'invalid enqueue argument `p_unique_key`: must not be null (a job '
                            'without a unique key is enqueued by job.enqueue)'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF p_replace IS NULL THEN
            RAISE EXCEPTION 'invalid enqueue argument `p_replace`: must not be null'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
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

-- As in migration 0012 (jit off since 0024), refusing a count that is negative or NULL.
CREATE OR REPLACE FUNCTION job.ordering_wake_up(max_keys integer) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    key text;
    promoted integer := 0;
BEGIN
    IF max_keys IS NULL OR max_keys < 0 THEN
        RAISE EXCEPTION 'invalid ordering_wake_up argument `max_keys`: must be 0 or more '
                        '(the most keys to wake up), got %', coalesce(max_keys::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR key IN
        SELECT DISTINCT w.ordering_key FROM job.ordering_wake w
        ORDER BY w.ordering_key
        LIMIT max_keys
    LOOP
        IF pg_try_advisory_xact_lock(job.ordering_lock_key(key)) THEN
            -- Forget the key first, then promote: an entry a release commits after this
            -- DELETE's snapshot stays for the next pass, and one it committed before is
            -- deleted here, but then the promotion's later snapshot sees that head finished.
            DELETE FROM job.ordering_wake w WHERE w.ordering_key = key;
            IF job.ordering_promote(key) THEN
                promoted := promoted + 1;
            END IF;
        END IF;
    END LOOP;
    RETURN promoted;
END
$$;

-- As in migration 0031, refusing a count that is negative or NULL.
CREATE OR REPLACE FUNCTION job.dependencies_resolve(max_jobs integer) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    dependent bigint;
    candidates bigint[];
    failed record;
    woken text;
    okey text;
    changed integer := 0;
BEGIN
    IF max_jobs IS NULL OR max_jobs < 0 THEN
        RAISE EXCEPTION 'invalid dependencies_resolve argument `max_jobs`: must be 0 or more '
                        '(the most dependents to resolve), got %', coalesce(max_jobs::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Flag the jobs that new edges wait for. Every write to an edge is made under its
    -- dependent's row lock, here as in the resolution below, and every lock is taken SKIP
    -- LOCKED, so that concurrent passes never wait for each other: a dependent or a job waited
    -- for that someone holds is flagged on a later pass. The dependents of an edge whose job
    -- no longer exists are resolved in this pass.
    WITH fresh AS (
        SELECT d.job_id, d.depends_on
        FROM job.dependencies d
        WHERE NOT d.flagged AND NOT d.resolved
        ORDER BY d.depends_on
        LIMIT max_jobs
    ),
    mine AS (
        SELECT j.id
        FROM job.jobs j
        WHERE j.id = ANY (ARRAY(SELECT DISTINCT f.job_id FROM fresh f))
        ORDER BY j.id
        FOR NO KEY UPDATE SKIP LOCKED
    ),
    held AS (
        SELECT j.id, j.awaited
        FROM job.jobs j
        WHERE j.id = ANY (ARRAY(SELECT DISTINCT f.depends_on FROM fresh f
                                WHERE f.job_id IN (SELECT m.id FROM mine m)))
        ORDER BY j.id
        FOR NO KEY UPDATE SKIP LOCKED
    ),
    awaited AS (
        UPDATE job.jobs j
        SET awaited = true
        WHERE j.id = ANY (ARRAY(SELECT h.id FROM held h WHERE NOT h.awaited))
    ),
    marked AS (
        UPDATE job.dependencies d
        SET flagged = true
        FROM fresh f
        WHERE d.job_id = f.job_id AND d.depends_on = f.depends_on
          AND f.job_id IN (SELECT m.id FROM mine m)
          AND (f.depends_on IN (SELECT h.id FROM held h)
               OR NOT EXISTS (SELECT 1 FROM job.jobs x WHERE x.id = f.depends_on))
        RETURNING d.job_id, d.depends_on
    )
    SELECT coalesce(array_agg(DISTINCT m.job_id), '{}') INTO candidates
    FROM marked m
    WHERE m.depends_on NOT IN (SELECT h.id FROM held h);

    -- The dependents of jobs that have ended (jobs_awaited_idx).
    candidates := candidates || ARRAY(
        SELECT DISTINCT d.job_id
        FROM job.jobs p
        JOIN job.dependencies d ON d.depends_on = p.id AND NOT d.resolved
        WHERE p.awaited AND p.state IN ('completed', 'cancelled', 'discarded')
        LIMIT max_jobs);

    -- At most once a minute, cluster-wide: every open edge, for jobs waited for that were
    -- deleted.
    PERFORM 1 FROM job.dependency_sweep s WHERE s.at < now() - interval '1 minute'
    FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        UPDATE job.dependency_sweep SET at = now();
        candidates := candidates || ARRAY(
            SELECT DISTINCT d.job_id
            FROM job.dependencies d
            LEFT JOIN job.jobs x ON x.id = d.depends_on
            WHERE NOT d.resolved
              AND (x.id IS NULL OR x.state IN ('completed', 'cancelled', 'discarded'))
            LIMIT max_jobs);
    END IF;

    FOR dependent IN SELECT DISTINCT c FROM unnest(candidates) AS c ORDER BY c LIMIT max_jobs
    LOOP
        SELECT j.ordering_key INTO okey FROM job.jobs j WHERE j.id = dependent
        FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.id = dependent) THEN
                DELETE FROM job.dependencies d WHERE d.job_id = dependent;
            END IF;
            CONTINUE;
        END IF;
        -- A keyed dependent (the doors refuse one, a raw write can make it) is promoted only
        -- through its key, under the key's lock: a key whose lock another transaction holds
        -- is tried again on the next pass.
        IF okey IS NOT NULL AND NOT pg_try_advisory_xact_lock(job.ordering_lock_key(okey)) THEN
            CONTINUE;
        END IF;
        -- Each edge resolved here records whether its job satisfied it: an `after_all` edge
        -- by any end, a `depends_on` edge only by a completion (a job cancelled, discarded or
        -- deleted did not). Redrive reads it once the job may be gone (redrive.sql).
        UPDATE job.dependencies d
        SET resolved  = true,
            satisfied = d.mode = 'finished'
                        OR EXISTS (SELECT 1 FROM job.jobs x
                                   WHERE x.id = d.depends_on AND x.state = 'completed')
        WHERE d.job_id = dependent AND NOT d.resolved
          AND NOT EXISTS (SELECT 1 FROM job.jobs x
                          WHERE x.id = d.depends_on
                            AND x.state NOT IN ('completed', 'cancelled', 'discarded'));
        SELECT d.depends_on, coalesce(x.state::text, 'deleted') AS ended INTO failed
        FROM job.dependencies d
        LEFT JOIN job.jobs x ON x.id = d.depends_on
        WHERE d.job_id = dependent AND d.mode = 'completed'
          AND d.satisfied IS NOT TRUE
          AND (x.state IN ('cancelled', 'discarded')
               OR (x.id IS NULL AND d.satisfied IS FALSE))
        ORDER BY d.depends_on
        LIMIT 1;
        IF FOUND THEN
            -- clock_timestamp(), not now(): now() is the start of the stager's statement,
            -- which may be before the dependency was finalized.
            UPDATE job.jobs j
            SET state        = 'discarded',
                finalized_at = clock_timestamp(),
                errors       = job.push_error(j.errors, jsonb_build_object(
                    'attempt', j.attempt,
                    'at', clock_timestamp(),
                    'class', 'dependency',
                    'message', format('job %s, which this job depends on, was %s',
                                      failed.depends_on, failed.ended)))
            WHERE j.id = dependent AND j.state = 'pending';
            IF FOUND THEN
                changed := changed + 1;
            END IF;
            -- Its other open edges are closed with it, their jobs not ended: whether those
            -- will satisfy them is not known (null).
            UPDATE job.dependencies d SET resolved = true, satisfied = NULL
            WHERE d.job_id = dependent AND NOT d.resolved;
        ELSIF okey IS NOT NULL THEN
            -- Its key's oldest pending job without open dependencies becomes the head, when
            -- the key has none; otherwise the key's release promotes it in its turn.
            IF job.ordering_promote(okey) THEN
                changed := changed + 1;
            END IF;
        ELSIF NOT EXISTS (SELECT 1 FROM job.dependencies d
                          WHERE d.job_id = dependent AND NOT d.resolved) THEN
            UPDATE job.jobs j
            SET state = CASE WHEN j.run_at > now() THEN 'scheduled'
                             ELSE 'available' END::job.job_state
            WHERE j.id = dependent AND j.state = 'pending'
            RETURNING CASE WHEN j.state = 'available' THEN j.queue END INTO woken;
            IF FOUND THEN
                changed := changed + 1;
                IF woken IS NOT NULL THEN
                    PERFORM pg_notify('job_insert', woken);
                END IF;
            END IF;
        END IF;
    END LOOP;

    -- Ended jobs that no open edge points at any longer leave jobs_awaited_idx.
    UPDATE job.jobs j
    SET awaited = false
    WHERE j.id = ANY (ARRAY(
        SELECT p.id
        FROM job.jobs p
        WHERE p.awaited AND p.state IN ('completed', 'cancelled', 'discarded')
          AND NOT EXISTS (SELECT 1 FROM job.dependencies d
                          WHERE d.depends_on = p.id AND NOT d.resolved)
        LIMIT max_jobs
        FOR NO KEY UPDATE SKIP LOCKED))
      AND j.awaited;
    RETURN changed;
END
$$;
