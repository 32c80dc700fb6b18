-- 0020 sql keys: job.enqueue and job.enqueue_many take `ordering_key` and `rate_key`, as the
-- Rust builder does. Append-only: change the schema in a new numbered file.
--
-- Two arguments more is a new signature, so the old job.enqueue is dropped, and with it its
-- grants: they are read first (pg_proc.proacl) and given again to the same roles on the new
-- one, so a role that could enqueue before still can. job.enqueue_many keeps its signature.
-- A key is 1 to 512 bytes (jobs_ordering_key_check, jobs_rate_key_check), refused otherwise
-- with SQLSTATE 22023 naming it. With a unique key, the keys go on the job only when it is
-- inserted (not on a duplicate or a replaced one), as for the Rust side. A rate key on a kind
-- without a rate limit limits nothing; the database does not know the kinds' limits (the Rust
-- side refuses it, knowing the kind).

-- The grants, kept for this transaction in a setting (no temporary table: the owner may lack
-- TEMPORARY on the database): [{"grantee": oid, "grantable": bool}, ...].
SELECT pg_catalog.set_config(
    'job.enqueue_grants',
    coalesce((SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                         'grantee', a.grantee, 'grantable', a.is_grantable))::text
              FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
              WHERE p.oid = 'job.enqueue(text, jsonb, text, integer, integer, timestamptz,
                                         integer, text, text, text, text[], text,
                                         timestamptz)'::pg_catalog.regprocedure
                AND a.privilege_type = 'EXECUTE'
                AND a.grantee <> p.proowner), '[]'),
    true);

DROP FUNCTION job.enqueue(text, jsonb, text, integer, integer, timestamptz, integer, text, text, text,
                  text[], text, timestamptz);

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
                              run_at, state, deadline, tags, tenant, ordering_key, rate_key)
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


REVOKE ALL ON FUNCTION job.enqueue(text, jsonb, text, integer, integer, timestamptz, integer, text, text, text,
                  text[], text, timestamptz, text, text) FROM PUBLIC;

DO $grants$
DECLARE
    g jsonb;
BEGIN
    FOR g IN SELECT e FROM pg_catalog.jsonb_array_elements(
                 pg_catalog.current_setting('job.enqueue_grants')::jsonb) e
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION job.enqueue(text, jsonb, text, integer, integer, '
            'timestamptz, integer, text, text, text, text[], text, timestamptz, text, text) '
            'TO %s%s',
            CASE WHEN (g ->> 'grantee')::oid = 0 THEN 'PUBLIC'
                 ELSE (g ->> 'grantee')::oid::pg_catalog.regrole::text END,
            CASE WHEN (g ->> 'grantable')::boolean THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$grants$;
