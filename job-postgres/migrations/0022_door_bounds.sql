-- 0022 door bounds: what a raw write (any role with table privileges: the README's worker
-- role) could store and a worker or a reader would then fail on, for every row of its batch
-- or every call, is refused by the table; a job that both waits for dependencies and holds an
-- ordering key (the doors refuse one, a raw write can make it) no longer stops the stager;
-- `job.ordering_lock_keys` runs as its owner; `job.enqueue_many` takes its ordering keys'
-- locks first, in one order; a change of `job.settings` holds writes to job.jobs, not reads;
-- a compensating job omits a discarded payload that does not fit with its error instead of
-- being given up; and `on_duplicate => 'replace'` replaces a holder pending behind its
-- ordering key, as the README says of every waiting one. Append-only: change the schema in a new
-- numbered file.
--
-- The constraints are NOT VALID: they hold for every row written from now on, without a scan
-- of the table under its lock at the upgrade.
--
-- Counters: a claim adds 1 to `attempt` and a snooze 1 to `snoozes`, and a release or a
-- snooze takes 1 from `attempt` of a running row. A row at the integer's maximum made every
-- claim of its queue fail ("integer out of range"), and a running row at attempt 0 every
-- release batch it was in.
ALTER TABLE job.jobs DROP CONSTRAINT jobs_attempt_check;
ALTER TABLE job.jobs ADD CONSTRAINT jobs_attempt_check
    CHECK (attempt >= 0 AND attempt < 2147483647 AND (state <> 'running' OR attempt >= 1))
    NOT VALID;
ALTER TABLE job.jobs DROP CONSTRAINT jobs_snoozes_check;
ALTER TABLE job.jobs ADD CONSTRAINT jobs_snoozes_check
    CHECK (snoozes >= 0 AND snoozes < 2147483647) NOT VALID;

-- Tags: an array whose first index is not 1 ('[5:5]={a}') is a valid text[] that readers
-- (sqlx) refuse to decode, so one such row failed every listing it was in.
ALTER TABLE job.jobs ADD CONSTRAINT jobs_tags_check
    CHECK (cardinality(tags) = 0 OR array_lower(tags, 1) = 1) NOT VALID;

-- Who holds a lease or a role: a worker's id, at most 128 bytes (the builder refuses longer).
-- Unbounded, a raw write's 10 MB `locked_by` was copied by the rescuer into the error history.
ALTER TABLE job.jobs ADD CONSTRAINT jobs_locked_by_check
    CHECK (octet_length(locked_by) <= 128) NOT VALID;
ALTER TABLE job.leaders ADD CONSTRAINT leaders_holder_check
    CHECK (octet_length(holder) <= 512 AND octet_length(role) <= 128) NOT VALID;

-- Times the readers decode: infinity or a year past 9999 made them panic (chrono), as for the
-- columns of migration 0007.
ALTER TABLE job.jobs ADD CONSTRAINT jobs_progress_at_check
    CHECK (progress_at >= '0001-01-01 00:00:00+00' AND progress_at < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.jobs ADD CONSTRAINT jobs_stuck_since_check
    CHECK (stuck_since >= '0001-01-01 00:00:00+00' AND stuck_since < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.pauses ADD CONSTRAINT pauses_paused_at_check
    CHECK (paused_at >= '0001-01-01 00:00:00+00' AND paused_at < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.pauses ADD CONSTRAINT pauses_resume_at_check
    CHECK (resume_at >= '0001-01-01 00:00:00+00' AND resume_at < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.steps ADD CONSTRAINT steps_recorded_at_check
    CHECK (recorded_at >= '0001-01-01 00:00:00+00' AND recorded_at < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.leaders ADD CONSTRAINT leaders_until_check
    CHECK (until >= '0001-01-01 00:00:00+00' AND until < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.breakers ADD CONSTRAINT breakers_window_start_check
    CHECK (window_start >= '0001-01-01 00:00:00+00' AND window_start < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.breakers ADD CONSTRAINT breakers_tripped_at_check
    CHECK (tripped_at >= '0001-01-01 00:00:00+00' AND tripped_at < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.compensations ADD CONSTRAINT compensations_updated_at_check
    CHECK (updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.kind_owners ADD CONSTRAINT kind_owners_updated_at_check
    CHECK (updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.rate_windows ADD CONSTRAINT rate_windows_updated_at_check
    CHECK (updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00') NOT VALID;

-- The Rust producer's bulk enqueue calls this with table privileges only (the README's worker
-- role): as its caller it could not call job.ordering_lock_key, which is not PUBLIC. It takes
-- advisory locks only, which any role can take with the same numbers.
ALTER FUNCTION job.ordering_lock_keys(text[]) SECURITY DEFINER;
ALTER FUNCTION job.ordering_lock_keys(text[]) SET search_path = pg_catalog, pg_temp;

-- A pending job with both open dependencies and an ordering key: the stager promoted it when
-- its dependencies ended without asking its key, and when the key had a head that update
-- broke jobs_ordering_head_idx, failing the stager's whole statement on every pass, for every
-- queue. The key's promotion, for its part, promoted such a job while it still waited for its
-- dependencies. Now each waits for the other.
CREATE OR REPLACE FUNCTION job.ordering_promote(key text) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    next record;
BEGIN
    IF EXISTS (SELECT 1 FROM job.jobs h
               WHERE h.ordering_key = key
                 AND h.state IN ('scheduled', 'available', 'running', 'retryable')) THEN
        RETURN false;
    END IF;
    SELECT p.id, p.queue, p.run_at INTO next
    FROM job.jobs p
    WHERE p.ordering_key = key AND p.state = 'pending'
      AND NOT EXISTS (SELECT 1 FROM job.dependencies d WHERE d.job_id = p.id AND NOT d.resolved)
    ORDER BY p.id
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- A pending row is written only under the key's lock, which the caller holds, or by an
    -- operator's cancel or purge; the guard skips a row that one of those just finished.
    UPDATE job.jobs
    SET state = CASE WHEN next.run_at > now() THEN 'scheduled' ELSE 'available' END::job.job_state
    WHERE id = next.id AND state = 'pending';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF next.run_at <= now() THEN
        PERFORM pg_notify('job_insert', next.queue);
    END IF;
    RETURN true;
END
$$;


CREATE OR REPLACE FUNCTION job.dependencies_resolve(max_jobs integer) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dependent bigint;
    failed record;
    woken text;
    okey text;
    changed integer := 0;
BEGIN
    FOR dependent IN
        SELECT DISTINCT d.job_id
        FROM job.dependencies d
        LEFT JOIN job.jobs x ON x.id = d.depends_on
        WHERE NOT d.resolved
          AND (x.id IS NULL OR x.state IN ('completed', 'cancelled', 'discarded'))
        LIMIT max_jobs
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
        UPDATE job.dependencies d
        SET resolved = true
        WHERE d.job_id = dependent AND NOT d.resolved
          AND NOT EXISTS (SELECT 1 FROM job.jobs x
                          WHERE x.id = d.depends_on
                            AND x.state NOT IN ('completed', 'cancelled', 'discarded'));
        SELECT d.depends_on, coalesce(x.state::text, 'deleted') AS ended INTO failed
        FROM job.dependencies d
        LEFT JOIN job.jobs x ON x.id = d.depends_on
        WHERE d.job_id = dependent AND d.mode = 'completed'
          AND (x.id IS NULL OR x.state IN ('cancelled', 'discarded'))
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
            UPDATE job.dependencies d SET resolved = true
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
    RETURN changed;
END
$$;


-- job.enqueue_many as in migration 0020, taking its ordering keys' locks before its rows',
-- checking its tags in strict mode (the lax jsonpath looked inside a nested array, so
-- `"tags": [["a"]]` passed and was stored as the tag `["a"]`), and reading integers written
-- with a fraction of zero (`1.0`, which the checks accept) through numeric: cast from their
-- text they failed with an error naming nothing (22P02).
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
                    RAISE EXCEPTION 'invalid enqueue argument `%.%`: not a timestamp: %',
                            at, field, SQLERRM
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

-- job.apply_settings as in migration 0005, replacing the admission trigger in place (CREATE OR
-- REPLACE TRIGGER, PostgreSQL 14): DROP TRIGGER took an ACCESS EXCLUSIVE lock on job.jobs, so
-- a change of the payload limit held every read and claim too until it committed, where the
-- README says writes.
CREATE OR REPLACE FUNCTION job.apply_settings() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION job.quickly_admissible(kind text, queue text, payload jsonb, '
        'tags text[], tenant text, unique_key text) RETURNS boolean '
        'LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        'SELECT ' || job.admission_predicate('', NEW.payload_limit));
    EXECUTE format(
        'CREATE OR REPLACE TRIGGER jobs_admission '
        'BEFORE INSERT OR UPDATE OF kind, queue, payload, tags, tenant, unique_key ON job.jobs '
        'FOR EACH ROW WHEN (%s IS NOT TRUE) EXECUTE FUNCTION job.check_admission()',
        job.admission_predicate('NEW.', NEW.payload_limit));
    RETURN NULL;
END
$$;

-- job.compensate as in migration 0014, measuring the whole wrapping against the payload limit:
-- a fixed margin of 4 KiB let a payload through that did not fit with an error message of up
-- to 8 KiB, and the compensating job was refused and given up (a WARNING only).
CREATE OR REPLACE FUNCTION job.compensate() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    fits boolean;
    wrapped jsonb;
BEGIN
    SELECT * INTO c FROM job.compensations WHERE kind = NEW.kind;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The whole wrapping is measured, as the admission rule measures a payload: the discarded
    -- payload goes in when it fits with the id, kind and last error, else it is omitted.
    wrapped := jsonb_build_object('discarded', jsonb_build_object(
        'job_id', NEW.id,
        'kind', NEW.kind,
        'payload', NEW.payload,
        'payload_omitted', false,
        'error', NEW.errors -> -1));
    SELECT octet_length(wrapped::text) <= s.payload_limit INTO fits FROM job.settings s;
    IF NOT coalesce(fits, false) THEN
        wrapped := jsonb_build_object('discarded', jsonb_build_object(
            'job_id', NEW.id,
            'kind', NEW.kind,
            'payload', NULL,
            'payload_omitted', true,
            'error', NEW.errors -> -1));
    END IF;
    BEGIN
        INSERT INTO job.jobs (kind, queue, payload, tenant, trace_context)
        VALUES (c.compensate_kind, c.compensate_queue, wrapped, NEW.tenant, NEW.trace_context);
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'job %: compensating job % not enqueued: %', NEW.id, c.compensate_kind,
            SQLERRM;
    END;
    RETURN NULL;
END
$$;

-- job.enqueue_unique as in migration 0016, replacing a holder that waits in `pending` (behind
-- its ordering key) too, keeping it there; it raised "already active" as for a running one.
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
                          state           = CASE WHEN j.state IN ('retryable', 'pending')
                                                 THEN j.state ELSE excluded.state END
                -- Only a waiting row is replaced: the lock taken by ON CONFLICT makes this
                -- test see a claim that moved the row to running an instant ago. A row
                -- pending behind its ordering key stays pending, in its place.
                WHERE j.state IN ('pending', 'scheduled', 'available', 'retryable')
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
