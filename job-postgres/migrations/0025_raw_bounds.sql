-- 0025 raw bounds: what a raw write (a role with table privileges: the README's worker role,
-- or the owner) could still store unbounded, or store and then fail every use of, is refused
-- by the table as the doors refuse it: an error history of any size, a kind owner's kind of
-- any length, a trace context of any 55 characters, a compensating job's kind or queue that
-- no job may have; `job.enqueue_unique` refuses the scope 'spent', which only a claim sets;
-- the row of `job.settings` can no longer be deleted (which turned the payload limit off);
-- and an edge of `job.dependencies` that closes a loop (whose jobs stayed pending for ever)
-- is refused. Append-only: change the schema in a new numbered file.
--
-- As in migration 0005, rows stored before keep what they have: the new rules are triggers
-- that fire on INSERT and on an UPDATE that sets their column (the claim, heartbeat and
-- finalize of an old row set none of them, or set it through job.push_error, which now
-- bounds what it returns whatever it is given), or constraints added NOT VALID on tables
-- whose rows the workers never rewrite with the old value.

-- The error history. job.push_error keeps the first entry and the latest 19 (MAX_ERROR_HISTORY
-- in job-core), and the Rust side cuts each message to 8 KiB (MAX_ERROR_MESSAGE): an entry is
-- at most about 48 KiB of JSON text (8 KiB of control characters, each escaped as \u00XX, and
-- the attempt, time and class), a history about 1 MB. A raw write stored any array, of any
-- size (50 MB), which every reader of the row (worker, listing, CLI, dashboard) then read
-- whole. Now it holds at most 20 entries and 2 MiB of JSON text.
--
-- job.push_error as in migration 0004, bounding what it returns whatever it is given: an
-- entry over 64 KiB of JSON text (the new one, or one kept from a history written before
-- these bounds, such as a rescue that copied a raw 10 MB `locked_by` into its message, or a
-- message of 10 MiB from before migration 0004) is replaced by its attempt, time and class
-- when they are short, and the first 4,096 characters of its message (or of its text, when it
-- has no message) with a note of how many bytes were cut. So no outcome, rescue, release,
-- expiry or cancellation of any row is ever refused by the bound below. A history under 20
-- entries and 1.5 MiB takes the new entry as before, at the cost of measuring its text.
CREATE OR REPLACE FUNCTION job.push_error(history jsonb, entry jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog
AS $$
    SELECT CASE
        WHEN jsonb_array_length(history) < 20
             AND octet_length(history::text) <= 1572864
             AND (entry IS NULL OR octet_length(entry::text) <= 65536)
            THEN history || jsonb_build_array(entry)
        ELSE (
            SELECT jsonb_agg(
                       CASE WHEN k.value IS NULL OR octet_length(k.value::text) <= 65536
                            THEN k.value
                            ELSE jsonb_build_object(
                                'attempt', CASE WHEN jsonb_typeof(k.value -> 'attempt') = 'number'
                                                     AND octet_length(k.value ->> 'attempt') <= 11
                                                THEN k.value -> 'attempt' END,
                                'at', CASE WHEN jsonb_typeof(k.value -> 'at') = 'string'
                                                AND octet_length(k.value ->> 'at') <= 64
                                           THEN k.value -> 'at' END,
                                'class', CASE WHEN jsonb_typeof(k.value -> 'class') = 'string'
                                                   AND octet_length(k.value ->> 'class') <= 128
                                              THEN k.value -> 'class' END,
                                'message', left(m.text, 4096)
                                           || format('… [%s bytes cut]',
                                                     octet_length(m.text)
                                                     - octet_length(left(m.text, 4096))))
                       END
                       ORDER BY k.n)
            FROM (
                SELECT e.value, e.n
                FROM jsonb_array_elements(history) WITH ORDINALITY AS e(value, n)
                WHERE e.n = 1 OR e.n > jsonb_array_length(history) - 18
                UNION ALL
                SELECT entry, 9223372036854775807
            ) k
            CROSS JOIN LATERAL (
                SELECT CASE WHEN jsonb_typeof(k.value -> 'message') = 'string'
                            THEN k.value ->> 'message' ELSE k.value::text END AS text
            ) m
        )
    END
$$;

COMMENT ON FUNCTION job.push_error(jsonb, jsonb) IS
    'Appends entry to an error history, keeping the first entry and the latest 19, each cut to 64 KiB of JSON text.';

-- Raises the refusal of an error history over the bound. The triggers' WHEN clauses are the
-- test, so a history within it costs no call; an UPDATE that sets `errors` to the value it
-- had (finalize.sql and cancel.sql write `errors = j.errors` when they append nothing) is not
-- refused, so a row stored before this bound keeps completing.
CREATE FUNCTION job.check_errors() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'job row refused: `errors` must be a JSON array of at most 20 entries and '
                    '2097152 bytes (as text), got % entries and % bytes',
            jsonb_array_length(NEW.errors), octet_length(NEW.errors::text)
        USING ERRCODE = 'check_violation', COLUMN = 'errors', TABLE = 'jobs', SCHEMA = 'job',
              CONSTRAINT = TG_NAME;
END
$$;

CREATE TRIGGER jobs_errors_insert
    BEFORE INSERT ON job.jobs
    FOR EACH ROW
    WHEN (CASE WHEN jsonb_typeof(NEW.errors) = 'array'
               THEN jsonb_array_length(NEW.errors) > 20
                    OR octet_length(NEW.errors::text) > 2097152
               ELSE false END)
    EXECUTE FUNCTION job.check_errors();

-- A finalize names `errors` in every UPDATE and changes it only on a failure: the unchanged
-- history is compared first, so a completion never measures its history as text.
CREATE TRIGGER jobs_errors_update
    BEFORE UPDATE OF errors ON job.jobs
    FOR EACH ROW
    WHEN (NEW.errors IS DISTINCT FROM OLD.errors
          AND CASE WHEN jsonb_typeof(NEW.errors) = 'array'
                   THEN jsonb_array_length(NEW.errors) > 20
                        OR octet_length(NEW.errors::text) > 2097152
                   ELSE false END)
    EXECUTE FUNCTION job.check_errors();

-- The trace context: a W3C traceparent of version 00 as the Rust side writes and reads it
-- (job_core::valid_traceparent: lower-case hex, a trace id and a parent id not all zeros).
-- The CHECK of migration 0009 asked only for 55 characters, and a worker joins no trace for
-- any other value. A trigger, not a CHECK: a row written before keeps being claimed.
CREATE FUNCTION job.check_trace_context() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'job row refused: `trace_context` must be a W3C traceparent '
                    '(00-<32 lower-case hex, not all 0>-<16 lower-case hex, not all 0>-<2 '
                    'lower-case hex>), got %', quote_literal(left(NEW.trace_context, 64))
        USING ERRCODE = 'check_violation', COLUMN = 'trace_context', TABLE = 'jobs',
              SCHEMA = 'job', CONSTRAINT = TG_NAME;
END
$$;

CREATE TRIGGER jobs_trace_context
    BEFORE INSERT OR UPDATE OF trace_context ON job.jobs
    FOR EACH ROW
    WHEN (NEW.trace_context !~ '^00-[0123456789abcdef]{32}-[0123456789abcdef]{16}-[0123456789abcdef]{2}$'
          OR substr(NEW.trace_context, 4, 32) = '00000000000000000000000000000000'
          OR substr(NEW.trace_context, 37, 16) = '0000000000000000')
    EXECUTE FUNCTION job.check_trace_context();

-- job.compensate as in migration 0022, giving the compensating job the discarded job's trace
-- only when it is one (a row stored before the trigger above may hold another value, which
-- the trigger would refuse, and the compensation with it).
CREATE OR REPLACE FUNCTION job.compensate() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    fits boolean;
    wrapped jsonb;
    trace text;
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
    IF NEW.trace_context ~ '^00-[0123456789abcdef]{32}-[0123456789abcdef]{16}-[0123456789abcdef]{2}$'
       AND substr(NEW.trace_context, 4, 32) <> '00000000000000000000000000000000'
       AND substr(NEW.trace_context, 37, 16) <> '0000000000000000' THEN
        trace := NEW.trace_context;
    END IF;
    BEGIN
        INSERT INTO job.jobs (kind, queue, payload, tenant, trace_context)
        VALUES (c.compensate_kind, c.compensate_queue, wrapped, NEW.tenant, trace);
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'job %: compensating job % not enqueued: %', NEW.id, c.compensate_kind,
            SQLERRM;
    END;
    RETURN NULL;
END
$$;

-- Names outside job.jobs. A kind owner's kind was any text (a raw 50 MB one was read by the
-- reporter with every owner); now 1 to 128 bytes, like the kind of every other table. A
-- compensation's kind, compensating kind and queue had only their length bounded: a
-- compensating kind or queue with a space failed every compensation of its kind (a WARNING
-- in the server log only), and a kind with one named no job. Now they follow the name rule
-- of the doors (job.name_problem, the same words), as the Rust side checks before it writes
-- them (`#[job(compensate = ..)]`). A key waiting for its stager was any text too, written by
-- the owner's functions only from a job's ordering key (1 to 512 bytes).
ALTER TABLE job.kind_owners ADD CONSTRAINT kind_owners_kind_check
    CHECK (octet_length(kind) BETWEEN 1 AND 128) NOT VALID;
ALTER TABLE job.ordering_wake ADD CONSTRAINT ordering_wake_ordering_key_check
    CHECK (octet_length(ordering_key) BETWEEN 1 AND 512) NOT VALID;

CREATE FUNCTION job.check_compensation() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad record;
BEGIN
    SELECT p.col, p.problem INTO bad
    FROM (VALUES (1, 'kind', job.name_problem(NEW.kind)),
                 (2, 'compensate_kind', job.name_problem(NEW.compensate_kind)),
                 (3, 'compensate_queue', job.name_problem(NEW.compensate_queue))
         ) AS p(ord, col, problem)
    WHERE p.problem IS NOT NULL
    ORDER BY p.ord
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'compensation refused: `%` %', bad.col, bad.problem
            USING ERRCODE = 'check_violation', COLUMN = bad.col, TABLE = 'compensations',
                  SCHEMA = 'job', CONSTRAINT = 'compensations_names';
    END IF;
    RETURN NEW;
END
$$;

-- The quick test inline, as jobs_admission's: a compensation whose names pass costs no call.
DO $names$
BEGIN
    EXECUTE format(
        'CREATE TRIGGER compensations_names '
        'BEFORE INSERT OR UPDATE OF kind, compensate_kind, compensate_queue '
        'ON job.compensations FOR EACH ROW WHEN ((%s) IS NOT TRUE) '
        'EXECUTE FUNCTION job.check_compensation()',
        format('octet_length(NEW.kind) BETWEEN 1 AND 128 AND NEW.kind !~ %1$L '
               'AND octet_length(NEW.compensate_kind) BETWEEN 1 AND 128 '
               'AND NEW.compensate_kind !~ %1$L '
               'AND octet_length(NEW.compensate_queue) BETWEEN 1 AND 128 '
               'AND NEW.compensate_queue !~ %1$L',
               job.forbidden_in_names()));
END
$names$;

-- job.enqueue_unique as in migration 0022, refusing a scope that is not one an enqueue may
-- give: 'spent' is what a claim makes of 'started', and a job inserted with it held nothing,
-- so its key was silently ignored. Refused as job.enqueue refuses its arguments (22023).
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

-- The settings' one row: deleting it (the owner may) turned the payload limit off at every
-- door, job.admission_problem finding no limit to measure against, and made every
-- compensation omit its payload. Now it cannot be deleted or truncated; a row deleted before
-- this migration is put back, with the default limit.
CREATE FUNCTION job.keep_settings() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'job.settings keeps its one row: change the payload limit with '
                    '`UPDATE job.settings SET payload_limit = ...`'
        USING ERRCODE = 'restrict_violation', TABLE = 'settings', SCHEMA = 'job';
END
$$;

CREATE TRIGGER settings_keep_row
    BEFORE DELETE ON job.settings
    FOR EACH ROW EXECUTE FUNCTION job.keep_settings();
CREATE TRIGGER settings_keep_table
    BEFORE TRUNCATE ON job.settings
    FOR EACH STATEMENT EXECUTE FUNCTION job.keep_settings();

INSERT INTO job.settings DEFAULT VALUES ON CONFLICT (singleton) DO NOTHING;

-- Dependencies that wait for each other: jobs in a loop of open edges stayed `pending` for
-- ever (the stager promotes a job only when every job it waits for has ended). The Rust side
-- refuses a loop within a batch, and its other edges point at jobs that already exist, which
-- cannot wait for a job not yet enqueued; a raw write could close one. Each new open edge
-- (an INSERT, or an UPDATE that opens an edge or moves it) is refused when the job it waits
-- for already waits, through open edges, for its dependent. The walk goes from the dependent
-- to the jobs that wait for it (dependencies_open_idx), which for a job the Rust side has just
-- enqueued is none or the few of its batch. Measured (one statement, 30,000 edges stored): a
-- batch callback's 10,000 edges 32-43 ms (23-40 ms without the check), 10,000 jobs waiting
-- for one 32-51 ms (23-34 ms), one edge at the end of a chain of 10,000 1.4-2.1 ms
-- (0.4-0.5 ms); 1,000 statements of 3 edges 43-65 ms (20-31 ms). Nested loops and no JIT:
-- planned without statistics for the transition table, the walk scanned the whole table at
-- each step (16 ms for the chain's edge, 2.9 ms for a statement of 3 edges) or was compiled
-- for longer than it ran.
-- Two transactions that each add one half of a loop at once are not seen by each other.
CREATE FUNCTION job.dependencies_refuse_loops() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
AS $$
DECLARE
    looped record;
BEGIN
    IF TG_LEVEL = 'ROW' THEN
        WITH RECURSIVE waiting(target, id) AS (
            SELECT NEW.depends_on, NEW.job_id
            UNION
            SELECT w.target, d.job_id
            FROM waiting w
            JOIN job.dependencies d ON d.depends_on = w.id AND NOT d.resolved
            WHERE w.id <> w.target
        )
        SELECT w.target INTO looped FROM waiting w WHERE w.id = w.target LIMIT 1;
    ELSE
        WITH RECURSIVE waiting(target, id) AS (
            SELECT a.depends_on, a.job_id FROM added a WHERE NOT a.resolved
            UNION
            SELECT w.target, d.job_id
            FROM waiting w
            JOIN job.dependencies d ON d.depends_on = w.id AND NOT d.resolved
            WHERE w.id <> w.target
        )
        SELECT w.target INTO looped FROM waiting w WHERE w.id = w.target LIMIT 1;
    END IF;
    IF FOUND THEN
        RAISE EXCEPTION 'dependency refused: `depends_on` closes a loop: job % would wait for '
                        'itself, and never run', looped.target
            USING ERRCODE = 'check_violation', COLUMN = 'depends_on', TABLE = 'dependencies',
                  SCHEMA = 'job', CONSTRAINT = TG_NAME;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER dependencies_loops_insert
    AFTER INSERT ON job.dependencies
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION job.dependencies_refuse_loops();
-- Row by row, so that the stager's updates (which close edges) call nothing.
CREATE TRIGGER dependencies_loops_update
    AFTER UPDATE OF job_id, depends_on, resolved ON job.dependencies
    FOR EACH ROW
    WHEN (NOT NEW.resolved AND (OLD.resolved OR OLD.job_id <> NEW.job_id
                                OR OLD.depends_on <> NEW.depends_on))
    EXECUTE FUNCTION job.dependencies_refuse_loops();

REVOKE ALL ON FUNCTION job.check_errors(), job.check_trace_context(),
    job.check_compensation(), job.keep_settings(),
    job.dependencies_refuse_loops() FROM PUBLIC;
