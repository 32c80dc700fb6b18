-- 0042 door_echoes: the SQL doors' errors repeat at most 40 characters of a value they refuse.
-- Append-only: change the schema in a new numbered file.
--
-- job.enqueue_many and job.enqueue repeated what they refused in full: an unknown field's
-- name (a megabyte-long key gave a megabyte-long error), an integer field's text
-- (`"priority": 1e100000`, 100 KB), a timestamp's (through the cast's own message), and
-- `unique_scope` and `on_duplicate`. Such an error goes to the caller, its logs and the
-- server's log. Now each is shown through job.shown(): at most 40 characters, control
-- characters as `?`, and the length in bytes when cut. The name rules quoted sizes only
-- already.

CREATE FUNCTION job.shown(value text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT regexp_replace(left(value, 40), '[[:cntrl:]]', '?', 'g')
           || CASE WHEN length(value) > 40
                   THEN format('… (%s bytes)', octet_length(value)) ELSE '' END
$$;

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
                        coalesce(quote_literal(job.shown(unique_scope)), 'null'))
        END
        UNION ALL
        SELECT 7, 'on_duplicate', CASE
            WHEN on_duplicate IS NULL OR on_duplicate NOT IN ('error', 'existing', 'replace')
            THEN format('must be ''error'', ''existing'' or ''replace'', got %s',
                        coalesce(quote_literal(job.shown(on_duplicate)), 'null'))
        END
    ) x
    WHERE x.problem IS NOT NULL
    ORDER BY x.ord
    LIMIT 1
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

