-- 0059 door_echoes_shown: what the SQL doors refuse or report is shown as job.shown shows it,
-- and two more refusals name their argument. Append-only: change the schema in a new numbered
-- file.
--
-- Migration 0042 made the doors show a refused value through job.shown (its first 40
-- characters, control characters as `?`, and its size): a value of any length, with newlines
-- or terminal escapes, never came back whole, to the caller or to the server's log. A probe of
-- the SQL doors found four messages that still echoed what they were given:
--
-- * job.breaker_record (the worker role's) echoed a kind the name rule refuses whole, and a
--   kind named twice: a 10 MB kind with newlines came back as a 10 MB error and went to the
--   server's log, twice. Its settings (p_percent, p_min_attempts, p_window_ms,
--   p_cool_down_ms) were checked only by job.breakers' CHECKs, which named a constraint and
--   showed the whole row; they are now refused first, with 22023 naming the argument and the
--   kind, in the table's bounds (which are unchanged).
-- * job.enqueue's refusal of an active duplicate (23505) and job.enqueue_unique's give-up
--   after racing a finishing duplicate echoed the unique key, up to 512 bytes with its control
--   characters.
-- * The trace context's trigger echoed 64 characters of the refused value, control characters
--   and escapes included.
--
-- And job.enqueue_many refused a job whose deadline is not after its run time through the
-- deadline door's trigger, which cannot say which element of the array it refuses: in a call
-- of 10,000 jobs the caller could not tell which. It now checks the same condition in its
-- loop, naming `jobs[i].deadline` (23514, COLUMN `deadline`, as the door says it).
--
-- Each function is its latest definition (migrations 0042, 0052, 0046 and 0025) with only those
-- changes. CREATE OR REPLACE keeps each function's owner and grants.

-- As in migration 0042, with the deadline checked in the loop.
CREATE OR REPLACE FUNCTION job.enqueue_many(jobs jsonb) RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    known CONSTANT text[] := ARRAY['kind', 'payload', 'queue', 'priority', 'max_attempts',
                                   'run_at', 'payload_version', 'tags', 'tenant', 'deadline',
                                   'ordering_key', 'rate_key'];
    types CONSTANT text[] := ARRAY['string', NULL, 'string', 'number', 'number',
                                   'string', 'number', 'array', 'string', 'string',
                                   'string', 'string'];
    j     jsonb;
    i     integer;
    field text;
    want  text;
    bad   record;
    at    text;
    -- one element's values
    kind            text;
    payload         jsonb;
    queue           text;
    priority        integer;
    max_attempts    integer;
    run_at          timestamptz;
    payload_version integer;
    tags            text[];
    tenant          text;
    deadline        timestamptz;
BEGIN
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
        RAISE EXCEPTION 'invalid enqueue argument `jobs`: must be a JSON array of jobs, got %',
                coalesce(jsonb_typeof(jobs), 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR j, i IN SELECT e.value, e.n - 1 FROM jsonb_array_elements(jobs) WITH ORDINALITY e(value, n)
    LOOP
        at := format('jobs[%s]', i);
        IF jsonb_typeof(j) <> 'object' THEN
            RAISE EXCEPTION 'invalid enqueue argument `%`: must be a JSON object, got %',
                    at, jsonb_typeof(j)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        FOR field IN SELECT k FROM jsonb_object_keys(j) k ORDER BY k LOOP
            IF field = 'unique_key' THEN
                RAISE EXCEPTION 'invalid enqueue argument `%.unique_key`: jobs with unique keys '
                                'cannot be enqueued in bulk; call job.enqueue for each', at
                    USING ERRCODE = 'invalid_parameter_value';
            ELSIF NOT field = ANY (known) THEN
                RAISE EXCEPTION 'invalid enqueue argument `%.%`: unknown field; the fields are %',
                        at, job.shown(field), array_to_string(known, ', ')
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            want := types[array_position(known, field)];
            IF want IS NOT NULL AND jsonb_typeof(j -> field) NOT IN (want, 'null') THEN
                RAISE EXCEPTION 'invalid enqueue argument `%.%`: must be a JSON %, got %',
                        at, field, want, jsonb_typeof(j -> field)
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END LOOP;
        FOREACH field IN ARRAY ARRAY['priority', 'max_attempts', 'payload_version'] LOOP
            IF jsonb_typeof(j -> field) = 'number'
               AND ((j ->> field)::numeric NOT BETWEEN -2147483648 AND 2147483647
                    OR (j ->> field)::numeric <> trunc((j ->> field)::numeric)) THEN
                RAISE EXCEPTION 'invalid enqueue argument `%.%`: must be an integer, got %',
                        at, field, job.shown(j ->> field)
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END LOOP;
        IF j ? 'tags' AND jsonb_typeof(j -> 'tags') = 'array'
           AND jsonb_path_exists(j -> 'tags', 'strict $[*] ? (@.type() != "string")') THEN
            RAISE EXCEPTION 'invalid enqueue argument `%.tags`: must be an array of strings', at
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        FOREACH field IN ARRAY ARRAY['ordering_key', 'rate_key'] LOOP
            IF octet_length(j ->> field) NOT BETWEEN 1 AND 512 THEN
                RAISE EXCEPTION 'invalid enqueue argument `%.%`: must be 1 to 512 bytes, got %',
                        at, field, octet_length(j ->> field)
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END LOOP;
        FOREACH field IN ARRAY ARRAY['run_at', 'deadline'] LOOP
            IF jsonb_typeof(j -> field) = 'string' THEN
                BEGIN
                    PERFORM (j ->> field)::timestamptz;
                EXCEPTION WHEN data_exception THEN
                    RAISE EXCEPTION 'invalid enqueue argument `%.%`: not a timestamp, got %',
                            at, field, job.shown(j ->> field)
                        USING ERRCODE = 'invalid_parameter_value';
                END;
            END IF;
        END LOOP;
        kind := j ->> 'kind';
        payload := j -> 'payload';
        queue := coalesce(j ->> 'queue', 'default');
        priority := coalesce((j ->> 'priority')::numeric::integer, 0);
        max_attempts := coalesce((j ->> 'max_attempts')::numeric::integer, 25);
        run_at := coalesce((j ->> 'run_at')::timestamptz, now());
        payload_version := coalesce((j ->> 'payload_version')::numeric::integer, 1);
        tags := CASE WHEN jsonb_typeof(j -> 'tags') = 'array'
                     THEN ARRAY(SELECT jsonb_array_elements_text(j -> 'tags')) ELSE '{}' END;
        tenant := j ->> 'tenant';
        deadline := (j ->> 'deadline')::timestamptz;
        -- The quick test first; the reason only when it fails.
        IF (job.quickly_admissible(kind, queue, payload, tags, tenant, NULL)
            AND priority BETWEEN 0 AND 32767 AND max_attempts >= 1 AND payload_version >= 1
            AND run_at >= '0001-01-01 00:00:00+00' AND run_at < '10000-01-01 00:00:00+00'
            AND (deadline IS NULL OR (deadline >= '0001-01-01 00:00:00+00'
                                      AND deadline < '10000-01-01 00:00:00+00'))) IS NOT TRUE
        THEN
            SELECT * INTO bad
            FROM job.enqueue_problem(kind, payload, queue, priority, max_attempts, run_at,
                                     payload_version, NULL, 'finished', 'error', tags, tenant,
                                     deadline);
            IF FOUND THEN
                RAISE EXCEPTION 'invalid enqueue argument `%.%`: %', at, bad.argument, bad.problem
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END IF;
        -- The deadline door's own test (job.refuse_deadline, jobs_deadline_door), here so
        -- that the element is named: the trigger cannot tell which one it refuses.
        IF deadline <= greatest(run_at, now()) THEN
            RAISE EXCEPTION 'invalid enqueue argument `%.deadline`: % is not after the run '
                            'time % and now %: the job could never start, only expire',
                    at, deadline, run_at, now()
                USING ERRCODE = 'check_violation', COLUMN = 'deadline';
        END IF;
    END LOOP;

    -- Every ordering key's lock first, in one order, as the Rust bulk enqueue does
    -- (job.ordering_lock_keys): taken row by row by the admission trigger, in the array's
    -- order, two bulk enqueues of the same keys in opposite orders deadlocked.
    PERFORM job.ordering_lock_keys(ARRAY(
        SELECT e.value ->> 'ordering_key' FROM jsonb_array_elements(jobs) AS e(value)));

    -- Rows go in in array order, so their identity ids ascend in input order (INSERT never
    -- runs in parallel); sorting the ids gives the input order back.
    RETURN QUERY
    WITH inserted AS (
        INSERT INTO job.jobs (kind, queue, priority, payload, payload_version, max_attempts,
                              run_at, state, deadline, tags, tenant, ordering_key, rate_key)
        SELECT e.value ->> 'kind',
               coalesce(e.value ->> 'queue', 'default'),
               coalesce((e.value ->> 'priority')::numeric::smallint, 0),
               e.value -> 'payload',
               coalesce((e.value ->> 'payload_version')::numeric::integer, 1),
               coalesce((e.value ->> 'max_attempts')::numeric::integer, 25),
               t.run_at,
               CASE WHEN t.run_at > now() THEN 'scheduled' ELSE 'available' END::job.job_state,
               (e.value ->> 'deadline')::timestamptz,
               CASE WHEN jsonb_typeof(e.value -> 'tags') = 'array'
                    THEN ARRAY(SELECT jsonb_array_elements_text(e.value -> 'tags'))
                    ELSE '{}' END,
               e.value ->> 'tenant',
               e.value ->> 'ordering_key',
               e.value ->> 'rate_key'
        FROM jsonb_array_elements(jobs) WITH ORDINALITY AS e(value, n)
        CROSS JOIN LATERAL (
            SELECT coalesce((e.value ->> 'run_at')::timestamptz, now()) AS run_at
        ) t
        ORDER BY e.n
        RETURNING job.jobs.id
    )
    SELECT inserted.id FROM inserted ORDER BY inserted.id;
END
$$;

-- As in migration 0052, the key shown.
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
                enqueue.kind, job.shown(enqueue.unique_key), new_id
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'jobs_unique_idx',
                  DETAIL = format('existing job: %s', new_id),
                  HINT = 'on_duplicate => ''existing'' returns its id instead';
    END IF;
    RETURN new_id;
END
$$;

-- As in migration 0052, the key shown.
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
    RAISE EXCEPTION 'enqueue of `%` with unique key `%` kept racing a finishing duplicate',
        p_kind, job.shown(p_unique_key);
END
$$;

-- As in migration 0046, the kind shown and the settings checked.
CREATE OR REPLACE FUNCTION job.breaker_record(
    p_kinds        text[],
    p_attempts     bigint[],
    p_failures     bigint[],
    p_percent      smallint[],
    p_min_attempts integer[],
    p_window_ms    bigint[],
    p_cool_down_ms bigint[]
)
RETURNS TABLE (kind text, reason text, resume_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r  record;
    cur job.breakers;
    why text;
    until timestamptz;
    written integer;
    n integer := coalesce(cardinality(p_kinds), 0);
BEGIN
    IF coalesce(cardinality(p_attempts), 0) <> n OR coalesce(cardinality(p_failures), 0) <> n
       OR coalesce(cardinality(p_percent), 0) <> n OR coalesce(cardinality(p_min_attempts), 0) <> n
       OR coalesce(cardinality(p_window_ms), 0) <> n OR coalesce(cardinality(p_cool_down_ms), 0) <> n
    THEN
        RAISE EXCEPTION 'invalid breaker_record arguments: the kinds, counts and settings must be '
                        'arrays of one length (% kinds, % attempts, % failures, % percents, '
                        '% minimums, % windows, % cool-downs)',
                        n, coalesce(cardinality(p_attempts), 0),
                        coalesce(cardinality(p_failures), 0), coalesce(cardinality(p_percent), 0),
                        coalesce(cardinality(p_min_attempts), 0),
                        coalesce(cardinality(p_window_ms), 0),
                        coalesce(cardinality(p_cool_down_ms), 0)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n > 1000 THEN
        RAISE EXCEPTION 'invalid breaker_record arguments: % kinds in one call (at most 1000)', n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT k.kind, job.name_problem(k.kind) AS problem INTO r
    FROM unnest(p_kinds) AS k(kind)
    WHERE job.name_problem(k.kind) IS NOT NULL
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'invalid breaker_record kind `%`: %', coalesce(job.shown(r.kind), 'null'),
                        r.problem
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT k.kind INTO r
    FROM unnest(p_kinds) AS k(kind)
    GROUP BY k.kind HAVING count(*) > 1
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'invalid breaker_record arguments: kind `%` is named more than once '
                        '(one call counts each kind once)', job.shown(r.kind)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.kind, c.attempts, c.failures INTO r
    FROM unnest(p_kinds, p_attempts, p_failures) AS c(kind, attempts, failures)
    WHERE c.attempts IS NULL OR c.attempts NOT BETWEEN 0 AND 4294967295
       OR c.failures IS NULL OR c.failures NOT BETWEEN 0 AND c.attempts
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'invalid breaker_record counts for kind `%`: % attempts and % failures '
                        '(one call counts 0 to 4294967295 attempts, and at most as many failures)',
                        r.kind, coalesce(r.attempts::text, 'null'),
                        coalesce(r.failures::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The settings, as the table's CHECKs bound them, named here: the table named only its
    -- constraint, with the whole row in the error's detail.
    SELECT k.kind, s.setting, s.value, s.bounds INTO r
    FROM unnest(p_kinds, p_percent, p_min_attempts, p_window_ms, p_cool_down_ms)
             AS k(kind, pct, min_attempts, window_ms, cool_down_ms)
    CROSS JOIN LATERAL (VALUES
        (1, 'p_percent', k.pct::bigint, 1::bigint, 100::bigint, '1 to 100'),
        (2, 'p_min_attempts', k.min_attempts::bigint, 1, 1000000, '1 to 1000000'),
        (3, 'p_window_ms', k.window_ms, 1000, 2592000000, '1000 to 2592000000 (1 s to 30 days)'),
        (4, 'p_cool_down_ms', k.cool_down_ms, 1000, 2592000000,
         '1000 to 2592000000 (1 s to 30 days)')
    ) AS s(ord, setting, value, low, high, bounds)
    WHERE s.value IS NULL OR s.value NOT BETWEEN s.low AND s.high
    ORDER BY k.kind, s.ord
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'invalid breaker_record argument `%` for kind `%`: must be %, got %',
                        r.setting, r.kind, r.bounds, coalesce(r.value::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    FOR r IN
        SELECT * FROM unnest(p_kinds, p_attempts, p_failures, p_percent, p_min_attempts,
                             p_window_ms, p_cool_down_ms)
                 AS k(kind, attempts, failures, pct, min_attempts, window_ms, cool_down_ms)
        ORDER BY 1
    LOOP
        INSERT INTO job.breakers AS b (kind, failure_percent, min_attempts, window_ms,
                                       cool_down_ms, window_start, attempts, failures)
        VALUES (r.kind, r.pct, r.min_attempts, r.window_ms, r.cool_down_ms, now(),
                r.attempts, r.failures)
        ON CONFLICT ON CONSTRAINT breakers_pkey DO UPDATE
        SET failure_percent = excluded.failure_percent,
            min_attempts    = excluded.min_attempts,
            window_ms       = excluded.window_ms,
            cool_down_ms    = excluded.cool_down_ms,
            window_start    = CASE WHEN now() >= b.window_start + b.window_ms * interval '1 millisecond'
                                   THEN now() ELSE b.window_start END,
            attempts        = least(CASE WHEN now() >= b.window_start + b.window_ms * interval '1 millisecond'
                                         THEN 0 ELSE b.attempts END::numeric + excluded.attempts,
                                    4611686018427387904)::bigint,
            failures        = least(CASE WHEN now() >= b.window_start + b.window_ms * interval '1 millisecond'
                                         THEN 0 ELSE b.failures END::numeric + excluded.failures,
                                    4611686018427387904)::bigint
        RETURNING * INTO cur;

        CONTINUE WHEN cur.attempts < cur.min_attempts
                   OR cur.failures::numeric * 100 < cur.failure_percent::numeric * cur.attempts;

        why := format('circuit breaker: %s of %s attempts failed (%s%%) in the window since %s; '
                      'it trips at %s%% of at least %s attempts per %s ms',
                      cur.failures, cur.attempts, trunc(cur.failures::numeric * 100 / cur.attempts),
                      to_char(cur.window_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                      cur.failure_percent, cur.min_attempts,
                      cur.window_ms);
        until := now() + cur.cool_down_ms * interval '1 millisecond';
        INSERT INTO job.pauses AS p (scope, name, paused_at, paused_by, reason, resume_at)
        VALUES ('kind', r.kind, now(), 'breaker', why, until)
        ON CONFLICT (scope, name) DO UPDATE
        SET paused_at = excluded.paused_at, paused_by = 'breaker', reason = excluded.reason,
            resume_at = excluded.resume_at
        WHERE p.resume_at IS NOT NULL AND p.resume_at <= now();
        GET DIAGNOSTICS written = ROW_COUNT;
        -- The counts start again either way; a trip while a pause is in force (the attempts
        -- that were running when it tripped, ending) is not counted.
        UPDATE job.breakers
        SET attempts = 0, failures = 0, window_start = now(),
            trips = least(trips::numeric + least(written, 1), 9223372036854775807)::bigint,
            tripped_at = CASE WHEN written > 0 THEN now() ELSE tripped_at END
        WHERE job.breakers.kind = r.kind;
        IF written > 0 THEN
            kind := r.kind;
            reason := why;
            resume_at := until;
            RETURN NEXT;
        END IF;
    END LOOP;
END
$$;

-- As in migration 0025, the value shown.
CREATE OR REPLACE FUNCTION job.check_trace_context() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'job row refused: `trace_context` must be a W3C traceparent '
                    '(00-<32 lower-case hex, not all 0>-<16 lower-case hex, not all 0>-<2 '
                    'lower-case hex>), got `%`', coalesce(job.shown(NEW.trace_context), 'null')
        USING ERRCODE = 'check_violation', COLUMN = 'trace_context', TABLE = 'jobs',
              SCHEMA = 'job', CONSTRAINT = TG_NAME;
END
$$;
