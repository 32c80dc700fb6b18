-- 0007 sql interface: enqueue from any language with everything the Rust side can say (unique
-- key and scope, tags, tenant, deadline, priority, scheduling, bulk), through functions that a
-- role without any table privilege may be allowed to call. Append-only: change the schema in
-- a new numbered file.
--
-- `job.enqueue` and `job.enqueue_many` are SECURITY DEFINER: they run with the rights of the
-- schema's owner (the role that ran the migrations), so an enqueue-only role needs EXECUTE on
-- them and USAGE on the schema, nothing else. Their search_path is pinned to pg_catalog (and
-- pg_temp last), every object they use is schema-qualified, they build no dynamic SQL, and
-- EXECUTE is revoked from PUBLIC: only the roles the owner grants it to may call them.
-- Upgrading from 0001's `job.enqueue`: its grants go with it; grant EXECUTE on the new one to
-- the roles that called the old one.

DROP FUNCTION job.enqueue(text, jsonb, text, integer, integer, timestamptz, integer);

-- What is wrong with a time, or NULL: finite and within 0001-01-01 .. 9999-12-31 UTC, as the
-- jobs_*_check constraints of 0005 require.
CREATE FUNCTION job.time_problem(t timestamptz, nullable boolean) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN t IS NULL THEN CASE WHEN NOT nullable THEN 'must not be null' END
        WHEN t >= '0001-01-01 00:00:00+00' AND t < '10000-01-01 00:00:00+00' THEN NULL
        ELSE format('must be between 0001-01-01 and 9999-12-31 UTC, got %s', t)
    END
$$;

-- The first argument of an enqueue that is refused, as (argument, problem), or no row: the
-- admission rules of 0005 and the rest of what `job_core::NewJob::validate` checks.
CREATE FUNCTION job.enqueue_problem(
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
        SELECT 1, 'priority', CASE WHEN priority IS NULL OR priority NOT BETWEEN 0 AND 32767
            THEN format('must be between 0 and 32767, got %s', coalesce(priority::text, 'null'))
        END
        UNION ALL
        SELECT 2, 'max_attempts', CASE WHEN max_attempts IS NULL OR max_attempts < 1
            THEN format('must be at least 1, got %s', coalesce(max_attempts::text, 'null'))
        END
        UNION ALL
        SELECT 3, 'payload_version', CASE WHEN payload_version IS NULL OR payload_version < 1
            THEN format('must be at least 1, got %s', coalesce(payload_version::text, 'null'))
        END
        UNION ALL
        SELECT 4, 'run_at', job.time_problem(run_at, false)
        UNION ALL
        SELECT 5, 'deadline', job.time_problem(deadline, true)
        UNION ALL
        SELECT 6, 'unique_scope', CASE
            WHEN unique_scope IS NULL OR unique_scope NOT IN ('finished', 'started', 'pruned')
            THEN format('must be ''finished'', ''started'' or ''pruned'', got %s',
                        coalesce(quote_literal(unique_scope), 'null'))
        END
        UNION ALL
        SELECT 7, 'on_duplicate', CASE
            WHEN on_duplicate IS NULL OR on_duplicate NOT IN ('error', 'existing', 'replace')
            THEN format('must be ''error'', ''existing'' or ''replace'', got %s',
                        coalesce(quote_literal(on_duplicate), 'null'))
        END
    ) x
    WHERE x.problem IS NOT NULL
    ORDER BY x.ord
    LIMIT 1
$$;

-- Enqueue one job from any language, with the options of the Rust builder:
--
--   SELECT job.enqueue('send_invoice', '{"invoice_id": 42}', queue => 'mail',
--                      unique_key => 'invoice:42', tags => ARRAY['billing'],
--                      tenant => 'acme', deadline => now() + interval '1 hour');
--
-- Refuses a bad argument with SQLSTATE 22023 (invalid_parameter_value) and a message naming
-- it. A unique key is decided by the unique index jobs_unique_idx, as for the Rust side:
-- `on_duplicate` 'error' (the default) refuses a duplicate with SQLSTATE 23505
-- (unique_violation), the holder's id in the message and the detail; 'existing' returns the
-- holder's id instead; 'replace' replaces a waiting holder's payload, run time and deadline and
-- returns its id (a running holder is still refused). Listening workers are woken on commit.
CREATE FUNCTION job.enqueue(
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
    deadline        timestamptz DEFAULT NULL
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

    IF enqueue.unique_key IS NULL THEN
        INSERT INTO job.jobs (kind, queue, priority, payload, payload_version, max_attempts,
                              run_at, state, deadline, tags, tenant)
        VALUES (enqueue.kind, enqueue.queue, enqueue.priority::smallint, enqueue.payload,
                enqueue.payload_version, enqueue.max_attempts, enqueue.run_at,
                CASE WHEN enqueue.run_at > now() THEN 'scheduled'
                     ELSE 'available' END::job.job_state,
                enqueue.deadline, enqueue.tags, enqueue.tenant)
        RETURNING id INTO new_id;
        RETURN new_id;
    END IF;

    SELECT u.id, u.outcome INTO new_id, outcome
    FROM job.enqueue_unique(enqueue.kind, enqueue.queue, enqueue.priority::smallint,
                            enqueue.payload, enqueue.payload_version, enqueue.max_attempts,
                            enqueue.run_at, enqueue.deadline, enqueue.unique_key,
                            enqueue.unique_scope, enqueue.on_duplicate = 'replace',
                            enqueue.tags, enqueue.tenant) u;
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

-- Enqueue many jobs in one statement and one round trip: `jobs` is a JSON array of objects
-- whose fields are job.enqueue's arguments (`kind` and `payload` required; `queue`,
-- `priority`, `max_attempts`, `run_at`, `payload_version`, `tags`, `tenant`, `deadline`
-- optional, with the same defaults). Returns the ids in input order. Refuses the whole batch,
-- naming the element and the field (`jobs[3].queue`), when any element is wrong; a field it
-- does not know is refused too, so that a misspelt option is never silently dropped. Unique
-- keys are refused, as in the Rust `enqueue_many`: each duplicate needs its own answer, so
-- enqueue those one by one.
CREATE FUNCTION job.enqueue_many(jobs jsonb) RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    known CONSTANT text[] := ARRAY['kind', 'payload', 'queue', 'priority', 'max_attempts',
                                   'run_at', 'payload_version', 'tags', 'tenant', 'deadline'];
    types CONSTANT text[] := ARRAY['string', NULL, 'string', 'number', 'number',
                                   'string', 'number', 'array', 'string', 'string'];
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
                        at, field, array_to_string(known, ', ')
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
                        at, field, j ->> field
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END LOOP;
        IF j ? 'tags' AND jsonb_typeof(j -> 'tags') = 'array'
           AND jsonb_path_exists(j -> 'tags', '$[*] ? (@.type() != "string")') THEN
            RAISE EXCEPTION 'invalid enqueue argument `%.tags`: must be an array of strings', at
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        FOREACH field IN ARRAY ARRAY['run_at', 'deadline'] LOOP
            IF jsonb_typeof(j -> field) = 'string' THEN
                BEGIN
                    PERFORM (j ->> field)::timestamptz;
                EXCEPTION WHEN data_exception THEN
                    RAISE EXCEPTION 'invalid enqueue argument `%.%`: not a timestamp: %',
                            at, field, SQLERRM
                        USING ERRCODE = 'invalid_parameter_value';
                END;
            END IF;
        END LOOP;
        kind := j ->> 'kind';
        payload := j -> 'payload';
        queue := coalesce(j ->> 'queue', 'default');
        priority := coalesce((j ->> 'priority')::integer, 0);
        max_attempts := coalesce((j ->> 'max_attempts')::integer, 25);
        run_at := coalesce((j ->> 'run_at')::timestamptz, now());
        payload_version := coalesce((j ->> 'payload_version')::integer, 1);
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
    END LOOP;

    -- Rows go in in array order, so their identity ids ascend in input order (INSERT never
    -- runs in parallel); sorting the ids gives the input order back.
    RETURN QUERY
    WITH inserted AS (
        INSERT INTO job.jobs (kind, queue, priority, payload, payload_version, max_attempts,
                              run_at, state, deadline, tags, tenant)
        SELECT e.value ->> 'kind',
               coalesce(e.value ->> 'queue', 'default'),
               coalesce((e.value ->> 'priority')::smallint, 0),
               e.value -> 'payload',
               coalesce((e.value ->> 'payload_version')::integer, 1),
               coalesce((e.value ->> 'max_attempts')::integer, 25),
               t.run_at,
               CASE WHEN t.run_at > now() THEN 'scheduled' ELSE 'available' END::job.job_state,
               (e.value ->> 'deadline')::timestamptz,
               CASE WHEN jsonb_typeof(e.value -> 'tags') = 'array'
                    THEN ARRAY(SELECT jsonb_array_elements_text(e.value -> 'tags'))
                    ELSE '{}' END,
               e.value ->> 'tenant'
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

REVOKE ALL ON FUNCTION job.enqueue(text, jsonb, text, integer, integer, timestamptz, integer,
                                   text, text, text, text[], text, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION job.enqueue_many(jsonb) FROM PUBLIC;

-- Nothing else is anyone's to call unless granted: the helpers above are called by the
-- functions and the trigger that own them; job.enqueue_unique (0002) is the Rust side's unique
-- insert, granted to the roles that write with the typed helpers (see the README's roles).
REVOKE ALL ON FUNCTION job.enqueue_unique(text, text, smallint, jsonb, integer, integer,
                                          timestamptz, timestamptz, text, text, boolean,
                                          text[], text) FROM PUBLIC;
REVOKE ALL ON FUNCTION job.name_problem(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION job.admission_problem(text, text, jsonb, text[], text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION job.time_problem(timestamptz, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION job.enqueue_problem(text, jsonb, text, integer, integer, timestamptz,
                                           integer, text, text, text, text[], text,
                                           timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION job.check_admission() FROM PUBLIC;
REVOKE ALL ON FUNCTION job.quickly_admissible(text, text, jsonb, text[], text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION job.admission_predicate(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION job.apply_settings() FROM PUBLIC;
REVOKE ALL ON FUNCTION job.forbidden_in_names() FROM PUBLIC;
REVOKE ALL ON FUNCTION job.notify_insert() FROM PUBLIC;
