\set ON_ERROR_STOP on
-- The `job` schema, generated from job-postgres/migrations/ by
-- job_postgres::schema_script(): do not edit; change a migration and regenerate
-- (JOB_SCHEMA_OVERWRITE=1 cargo test -p job-postgres --lib).
--
-- Install or upgrade: psql -v ON_ERROR_STOP=1 -f schema.sql (as the role that is to
-- own the schema). Each migration not yet recorded in job.schema_migrations is applied
-- in a transaction of its own and recorded, as the Rust migrator does.
--
-- psql stops at the first error (the first line sets ON_ERROR_STOP whatever psql was
-- told): a migration that failed is not followed by later ones. And each migration
-- refuses to apply when one before it is not recorded or one after it is, as the Rust
-- migrator does, so a client that goes on past an error applies nothing out of order.

DO $encoding$
BEGIN
    IF (SELECT pg_encoding_to_char(encoding) FROM pg_catalog.pg_database
        WHERE datname = current_database()) = 'SQL_ASCII' THEN
        RAISE EXCEPTION 'database % has encoding SQL_ASCII, which stores text without checking it: job needs an encoding PostgreSQL checks, such as UTF8', current_database();
    END IF;
END
$encoding$;
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
-- Creates the schema and the table recording applied migrations (simple protocol: two statements).
CREATE SCHEMA IF NOT EXISTS job;
CREATE TABLE IF NOT EXISTS job.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
COMMIT;

-- 0001 init
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 1) THEN
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 1;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 1 `init` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 1 applied now could undo what later migrations changed. Apply what migration 1 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0001$
-- 0001 init: the job table, its states, the claim and rescue indexes, insert notifications and
-- the `job.enqueue` SQL function. Append-only: change the schema in a new numbered file.

CREATE TYPE job.job_state AS ENUM (
    'scheduled',  -- run_at in the future
    'available',  -- ready to be claimed
    'running',    -- claimed; a worker holds its lease
    'retryable',  -- failed an attempt, waiting out its backoff
    'completed',  -- terminal
    'cancelled',  -- terminal
    'discarded'   -- terminal: dead letter
);

CREATE TABLE job.jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             text          NOT NULL,
    queue            text          NOT NULL DEFAULT 'default',
    priority         smallint      NOT NULL DEFAULT 0,
    payload          jsonb         NOT NULL DEFAULT '{}',
    payload_version  integer       NOT NULL DEFAULT 1,
    attempt          integer       NOT NULL DEFAULT 0,
    max_attempts     integer       NOT NULL DEFAULT 25,
    run_at           timestamptz   NOT NULL DEFAULT now(),
    deadline         timestamptz,
    unique_key       text,
    state            job.job_state NOT NULL DEFAULT 'available',
    lock_token       uuid,
    locked_until     timestamptz,
    locked_by        text,
    cancel_requested boolean       NOT NULL DEFAULT false,
    snoozes          integer       NOT NULL DEFAULT 0,
    -- attempt history, oldest first: [{attempt, at, class, message}, ...]
    errors           jsonb         NOT NULL DEFAULT '[]',
    created_at       timestamptz   NOT NULL DEFAULT now(),
    finalized_at     timestamptz,

    CONSTRAINT jobs_kind_check CHECK (octet_length(kind) BETWEEN 1 AND 128),
    CONSTRAINT jobs_queue_check CHECK (octet_length(queue) BETWEEN 1 AND 128),
    CONSTRAINT jobs_priority_check CHECK (priority >= 0),
    CONSTRAINT jobs_payload_version_check CHECK (payload_version >= 1),
    CONSTRAINT jobs_attempt_check CHECK (attempt >= 0),
    CONSTRAINT jobs_max_attempts_check CHECK (max_attempts >= 1),
    CONSTRAINT jobs_snoozes_check CHECK (snoozes >= 0),
    CONSTRAINT jobs_errors_check CHECK (jsonb_typeof(errors) = 'array'),
    -- a lease (token and expiry) exists exactly while running; locked_by only with a lease
    CONSTRAINT jobs_lease_check CHECK (
        (state = 'running') = (lock_token IS NOT NULL)
        AND (lock_token IS NULL) = (locked_until IS NULL)
        AND (locked_by IS NULL OR lock_token IS NOT NULL)
    ),
    CONSTRAINT jobs_finalized_check CHECK (
        (state IN ('completed', 'cancelled', 'discarded')) = (finalized_at IS NOT NULL)
    )
)
-- Every claim, heartbeat and finalize rewrites the row: leave room on each page for the new
-- version, and vacuum this high-churn table sooner than the defaults would.
WITH (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05
);

-- The claim path: only waiting rows are indexed, so its cost does not grow with finished jobs.
-- Its order is the claim's order.
CREATE INDEX jobs_claim_idx ON job.jobs (queue, priority, run_at, id)
    WHERE state IN ('available', 'scheduled', 'retryable');

-- The rescuer: only running rows, by lease expiry. The predicate says `locked_until IS NOT NULL`
-- (the same rows, by jobs_lease_check) rather than `state = 'running'`: the rescue's
-- `locked_until < now()` implies it, but the `state = 'running'` guard of heartbeat, finalize
-- and release does not, so their plans look their batch up by primary key instead of walking
-- every running row.
CREATE INDEX jobs_rescue_idx ON job.jobs (locked_until)
    WHERE locked_until IS NOT NULL;

-- Pruning finished jobs by age; keeps the pruner off the whole table.
CREATE INDEX jobs_finalized_idx ON job.jobs (finalized_at)
    WHERE finalized_at IS NOT NULL;

-- One notification per distinct queue that received due work, whatever inserted the rows (the
-- Rust store, bulk inserts, `job.enqueue`, raw SQL). NOTIFY is delivered at commit, so a
-- rolled-back enqueue wakes nobody.
CREATE FUNCTION job.notify_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('job_insert', q.queue)
    FROM (
        SELECT DISTINCT i.queue
        FROM inserted i
        WHERE i.state IN ('available', 'scheduled', 'retryable') AND i.run_at <= now()
    ) q;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_notify_insert
    AFTER INSERT ON job.jobs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT
    EXECUTE FUNCTION job.notify_insert();

-- Enqueue from any language:
--   SELECT job.enqueue('mail.send', '{"to": "a@example.com"}', queue => 'mail');
-- Checks its arguments as the Rust side does and raises `invalid_parameter_value` naming the
-- bad one. `priority` is an integer (not smallint) so that plain literals resolve.
CREATE FUNCTION job.enqueue(
    kind            text,
    payload         jsonb,
    queue           text        DEFAULT 'default',
    priority        integer     DEFAULT 0,
    max_attempts    integer     DEFAULT 25,
    run_at          timestamptz DEFAULT now(),
    payload_version integer     DEFAULT 1
) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    arg  text;
    val  text;
    new_id bigint;
BEGIN
    FOREACH arg IN ARRAY ARRAY['kind', 'queue'] LOOP
        val := CASE arg WHEN 'kind' THEN enqueue.kind ELSE enqueue.queue END;
        IF val IS NULL OR val = '' THEN
            RAISE EXCEPTION 'invalid enqueue argument `%`: must not be empty', arg
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF octet_length(val) > 128 THEN
            RAISE EXCEPTION 'invalid enqueue argument `%`: must be at most 128 bytes, got %',
                arg, octet_length(val)
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF val ~ '[[:space:][:cntrl:]]' THEN
            RAISE EXCEPTION 'invalid enqueue argument `%`: must not contain whitespace or control characters, got %',
                arg, quote_literal(val)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    IF enqueue.payload IS NULL THEN
        RAISE EXCEPTION 'invalid enqueue argument `payload`: must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.priority IS NULL OR enqueue.priority NOT BETWEEN 0 AND 32767 THEN
        RAISE EXCEPTION 'invalid enqueue argument `priority`: must be between 0 and 32767, got %',
            coalesce(enqueue.priority::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.max_attempts IS NULL OR enqueue.max_attempts < 1 THEN
        RAISE EXCEPTION 'invalid enqueue argument `max_attempts`: must be at least 1, got %',
            coalesce(enqueue.max_attempts::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.run_at IS NULL THEN
        RAISE EXCEPTION 'invalid enqueue argument `run_at`: must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.payload_version IS NULL OR enqueue.payload_version < 1 THEN
        RAISE EXCEPTION 'invalid enqueue argument `payload_version`: must be at least 1, got %',
            coalesce(enqueue.payload_version::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    INSERT INTO job.jobs (kind, queue, priority, payload, payload_version, max_attempts, run_at, state)
    VALUES (
        enqueue.kind,
        enqueue.queue,
        enqueue.priority::smallint,
        enqueue.payload,
        enqueue.payload_version,
        enqueue.max_attempts,
        enqueue.run_at,
        CASE WHEN enqueue.run_at > now() THEN 'scheduled' ELSE 'available' END::job.job_state
    )
    RETURNING id INTO new_id;
    RETURN new_id;
END
$$;
$job_migration_0001$;
        INSERT INTO job.schema_migrations (version, name) VALUES (1, 'init');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 1 AND name = 'init') THEN
        RAISE EXCEPTION 'job migration 1 is recorded in job.schema_migrations as `%`, but this script''s migration 1 is `init`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 1);
    END IF;
END
$apply$;
COMMIT;

-- 0002 lifecycle
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 2) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 2 `lifecycle` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 2;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 2 `lifecycle` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 2 applied now could undo what later migrations changed. Apply what migration 2 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0002$
-- 0002 lifecycle: unique jobs, metadata (tags, tenant), deadlines, pauses. Append-only.

-- How long a job's unique key holds (null when the job has no key):
--   'finished' while scheduled, available, running or retryable;
--   'started'  while scheduled, available or retryable, until its first claim: the claim
--              turns it into 'spent', so a started job never takes its key back (a retry,
--              snooze or release of it cannot collide with the newer job its start let in);
--   'spent'    a 'started' job that has started: holds nothing;
--   'pruned'   in every state, until the row is deleted (periodic jobs: a period that already
--              ran never fires again, whichever worker's scheduler comes late).
ALTER TABLE job.jobs
    ADD COLUMN unique_scope text,
    ADD COLUMN tags         text[] NOT NULL DEFAULT '{}',
    ADD COLUMN tenant       text,
    ADD CONSTRAINT jobs_unique_scope_check CHECK (
        (unique_key IS NULL) = (unique_scope IS NULL)
        AND unique_scope IN ('finished', 'started', 'spent', 'pruned')
    ),
    ADD CONSTRAINT jobs_unique_key_check CHECK (octet_length(unique_key) BETWEEN 1 AND 512),
    ADD CONSTRAINT jobs_tenant_check CHECK (octet_length(tenant) BETWEEN 1 AND 128);

-- The one guard of unique jobs: a duplicate insert fails here, or is turned into a
-- `ON CONFLICT (kind, unique_key) WHERE <this predicate>` by the enqueue. Every statement that
-- infers this index must repeat the predicate exactly (see sql/enqueue_unique.sql).
CREATE UNIQUE INDEX jobs_unique_idx ON job.jobs (kind, unique_key)
    WHERE unique_key IS NOT NULL AND (
        unique_scope = 'pruned'
        OR (unique_scope = 'finished'
            AND state IN ('scheduled', 'available', 'running', 'retryable'))
        OR (unique_scope = 'started'
            AND state IN ('scheduled', 'available', 'retryable'))
    );

-- The deadline pass: waiting jobs that have a deadline.
CREATE INDEX jobs_deadline_idx ON job.jobs (deadline)
    WHERE deadline IS NOT NULL AND state IN ('available', 'scheduled', 'retryable');

-- Dead letters by time, for listing, redriving and purging.
CREATE INDEX jobs_discarded_idx ON job.jobs (finalized_at, id)
    WHERE state = 'discarded';

-- Paused queues and kinds: the claim takes nothing that matches a row here. Small by nature.
CREATE TABLE job.pauses (
    scope     text        NOT NULL CHECK (scope IN ('queue', 'kind')),
    name      text        NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 128),
    paused_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, name)
);

-- Inserts one job with a unique key, deciding duplicates by jobs_unique_idx and never by a
-- pre-check. Returns the job's id and what happened: 'inserted'; 'replaced' (the waiting
-- duplicate's payload, run time and deadline were overwritten: `replace`, and never a running
-- one); or 'duplicate' (the existing job's id, left alone). A function, so that the fallback
-- read of the existing row is a statement of its own with a fresh snapshot: a duplicate
-- committed by a concurrent enqueue while this one waited on the index is visible to it.
CREATE FUNCTION job.enqueue_unique(
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
                        AND state IN ('scheduled', 'available', 'running', 'retryable'))
                    OR (unique_scope = 'started'
                        AND state IN ('scheduled', 'available', 'retryable')))
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
                        AND state IN ('scheduled', 'available', 'running', 'retryable'))
                    OR (unique_scope = 'started'
                        AND state IN ('scheduled', 'available', 'retryable')))
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
                AND j.state IN ('scheduled', 'available', 'running', 'retryable'))
            OR (j.unique_scope = 'started'
                AND j.state IN ('scheduled', 'available', 'retryable')));
        IF enqueue_unique.id IS NOT NULL THEN
            RETURN;
        END IF;
        -- The duplicate finished between the insert and the read: try again.
    END LOOP;
    RAISE EXCEPTION 'enqueue of `%` with unique key % kept racing a finishing duplicate',
        p_kind, quote_literal(p_unique_key);
END
$$;

-- The expire pass's other half: waiting jobs whose cancellation was requested while they ran.
CREATE INDEX jobs_cancel_requested_idx ON job.jobs (id)
    WHERE cancel_requested AND state IN ('available', 'scheduled', 'retryable');
$job_migration_0002$;
        INSERT INTO job.schema_migrations (version, name) VALUES (2, 'lifecycle');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 2 AND name = 'lifecycle') THEN
        RAISE EXCEPTION 'job migration 2 is recorded in job.schema_migrations as `%`, but this script''s migration 2 is `lifecycle`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 2);
    END IF;
END
$apply$;
COMMIT;

-- 0003 steps
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 3) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 3 `steps` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 3;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 3 `steps` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 3 applied now could undo what later migrations changed. Apply what migration 3 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0003$
-- 0003 steps: durable step outputs (receipts), one row per job and step name, written by
-- `JobContext::step` under the attempt's lease. A row goes with its job (ON DELETE CASCADE), so
-- pruning a job prunes its steps; the primary key serves both the per-attempt load by job and
-- the cascade. Append-only: change the schema in a new numbered file.

CREATE TABLE job.steps (
    job_id      bigint      NOT NULL REFERENCES job.jobs (id) ON DELETE CASCADE,
    name        text        NOT NULL,
    -- the step's output as the handler serialized it
    output      jsonb       NOT NULL,
    -- the attempt that ran the step
    attempt     integer     NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),

    PRIMARY KEY (job_id, name),
    CONSTRAINT steps_name_check CHECK (octet_length(name) BETWEEN 1 AND 128)
);
$job_migration_0003$;
        INSERT INTO job.schema_migrations (version, name) VALUES (3, 'steps');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 3 AND name = 'steps') THEN
        RAISE EXCEPTION 'job migration 3 is recorded in job.schema_migrations as `%`, but this script''s migration 3 is `steps`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 3);
    END IF;
END
$apply$;
COMMIT;

-- 0004 isolation
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 4) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 4 `isolation` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 4;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 4 `isolation` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 4 applied now could undo what later migrations changed. Apply what migration 4 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0004$
-- 0004 isolation: what a worker needs to keep its promises whatever its handlers do.
--
-- `stuck_since`: set by the heartbeat while a running execution's code has outlived its timeout
-- (or being told to stop) by the worker's `stuck_after`; the execution keeps its lease. Every
-- statement that clears a lease clears it too, and the CHECK makes that a rule.
--
-- `job.push_error(history, entry)`: appends one entry to an error history and keeps it bounded:
-- the first entry and the latest 19 (20 in all; MAX_ERROR_HISTORY in job-core). finalize.sql,
-- rescue_expired.sql and release.sql append through it, so no job's history grows without
-- bound (a job retried forever with 10 MiB messages once made a 262 MB row). A history longer
-- than that (written before this migration) is cut the first time an entry is appended.
-- Append-only: change the schema in a new numbered file.

ALTER TABLE job.jobs ADD COLUMN stuck_since timestamptz;

ALTER TABLE job.jobs ADD CONSTRAINT jobs_stuck_check
    CHECK (stuck_since IS NULL OR lock_token IS NOT NULL) NOT VALID;
ALTER TABLE job.jobs VALIDATE CONSTRAINT jobs_stuck_check;

CREATE FUNCTION job.push_error(history jsonb, entry jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog
AS $$
    SELECT CASE
        WHEN jsonb_array_length(history) < 20 THEN history || jsonb_build_array(entry)
        ELSE jsonb_build_array(history -> 0)
             || coalesce((SELECT jsonb_agg(e.value ORDER BY e.ordinality)
                          FROM jsonb_array_elements(history) WITH ORDINALITY AS e
                          WHERE e.ordinality > jsonb_array_length(history) - 18),
                         '[]'::jsonb)
             || jsonb_build_array(entry)
    END
$$;

COMMENT ON FUNCTION job.push_error(jsonb, jsonb) IS
    'Appends entry to an error history, keeping the first entry and the latest 19.';
$job_migration_0004$;
        INSERT INTO job.schema_migrations (version, name) VALUES (4, 'isolation');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 4 AND name = 'isolation') THEN
        RAISE EXCEPTION 'job migration 4 is recorded in job.schema_migrations as `%`, but this script''s migration 4 is `isolation`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 4);
    END IF;
END
$apply$;
COMMIT;

-- 0005 rules
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 5) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 5 `rules` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 5;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 5 `rules` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 5 applied now could undo what later migrations changed. Apply what migration 5 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0005$
-- 0005 rules: one set of rules for what a job row may hold, checked by the database at every
-- door (the Rust helpers, `job.enqueue`, a raw INSERT), and the one place where the payload
-- limit is configured. Append-only: change the schema in a new numbered file.
--
-- Two kinds of rules:
--
-- * Admission rules (names, payload, tags, tenant, unique key) are checked when a value is
--   written: by the trigger `jobs_admission`, on INSERT and on an UPDATE that sets one of
--   those columns. Rows stored before this migration that break them (a payload over a limit that an
--   older client allowed, a kind with a zero-width character, an array payload of a
--   hand-written `Job`) were written by code that was allowed to write them: they stay as they
--   are and run as before. A CHECK would not do here: PostgreSQL checks every CHECK on every
--   UPDATE of a row, so each claim and finalize of such a row would fail, and with it the
--   whole batch of the claim.
-- * Row invariants (timestamps PostgreSQL, Rust, Python and JavaScript can all represent)
--   must hold for every row, or reading the row fails: infinite and out-of-range times are
--   clamped below (the meaning is kept: `infinity` was "never", `-infinity` "long ago"), then
--   each column gets a CHECK, added NOT VALID here (the table is locked only for the clamp)
--   and validated by migration 0006 in a transaction of its own, which lets writes go on.

-- The payload limit, in bytes of the payload's JSON text as PostgreSQL prints it
-- (`octet_length(payload::text)`). One row. Change it with
-- `UPDATE job.settings SET payload_limit = 2097152;` (as the schema's owner): every door
-- obeys it from the next statement on (job.apply_settings, below). Jobs already stored are
-- not affected.
CREATE TABLE job.settings (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    payload_limit integer NOT NULL DEFAULT 1048576
                  CONSTRAINT settings_payload_limit_check CHECK (payload_limit BETWEEN 2 AND 268435455)
);

-- The characters no kind, queue, tag, tenant or pause name may contain, as a regular
-- expression: whitespace, control and format characters (Unicode White_Space, Cc, Cf, Zs, Zl
-- and Zp: tabs, newlines, no-break and zero-width spaces, bidirectional overrides, soft
-- hyphens, tag characters). The list is explicit, so it does not depend on the database's
-- locale; `job_core::new_job::FORBIDDEN_IN_NAMES` is the same list (a test compares the two
-- over every Unicode code point).
CREATE FUNCTION job.forbidden_in_names() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT '[\u0001-\u0020\u007f-\u00a0\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]'::text $$;

-- What is wrong with a kind, queue, tag, tenant or pause name, or NULL when nothing is.
-- `job_core::new_job::name_problem` is the same rule with the same words: 1 to `max_bytes`
-- bytes, none of them in job.forbidden_in_names().
CREATE FUNCTION job.name_problem(name text, max_bytes integer DEFAULT 128) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN name IS NULL THEN 'must not be null'
        WHEN name = '' THEN 'must not be empty'
        WHEN octet_length(name) > max_bytes
            THEN format('must be at most %s bytes, got %s', max_bytes, octet_length(name))
        WHEN name ~ job.forbidden_in_names()
            THEN (
                SELECT format('must not contain whitespace, control or format characters '
                              '(U+%s at character %s)',
                              upper(lpad(h, greatest(4, length(h)), '0')), position(c IN name))
                FROM substring(name FROM job.forbidden_in_names()) AS c,
                     to_hex(ascii(c)) AS h
            )
    END
$$;

-- The first admission rule a job's values break, as (the column, what is wrong), or no row.
-- Used by the triggers below and by `job.enqueue` / `job.enqueue_many` (migration 0007), so
-- every door says the same thing. The Rust side checks the same rules before it sends a job
-- (`job_core::NewJob::validate`).
CREATE FUNCTION job.admission_problem(
    kind       text,
    queue      text,
    payload    jsonb,
    tags       text[],
    tenant     text,
    unique_key text,
    OUT "column" text,
    OUT problem  text
)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT p.col, p.problem
    FROM (
        SELECT 1 AS ord, 'kind' AS col, job.name_problem(kind) AS problem
        UNION ALL
        SELECT 2, 'queue', job.name_problem(queue)
        UNION ALL
        SELECT 3, 'payload', CASE
            WHEN payload IS NULL THEN 'must not be null'
            WHEN jsonb_typeof(payload) <> 'object'
                THEN format('must be a JSON object, got %s', CASE jsonb_typeof(payload)
                                WHEN 'array' THEN 'an array' WHEN 'string' THEN 'a string'
                                WHEN 'number' THEN 'a number' WHEN 'boolean' THEN 'a boolean'
                                ELSE jsonb_typeof(payload) END)
            ELSE (
                SELECT format('is %s bytes, over the limit of %s bytes', n, s.payload_limit)
                FROM job.settings s, octet_length(payload::text) AS n
                WHERE n > s.payload_limit
            )
        END
        UNION ALL
        SELECT 4, 'tags', CASE
            WHEN tags IS NULL THEN 'must not be null'
            WHEN array_ndims(tags) > 1 THEN 'must be a one-dimensional array'
            WHEN cardinality(tags) > 32
                THEN format('at most 32 tags, got %s', cardinality(tags))
            ELSE (
                SELECT format('tag %s %s', t.n, coalesce(job.name_problem(t.tag), ''))
                FROM unnest(tags) WITH ORDINALITY AS t(tag, n)
                WHERE job.name_problem(t.tag) IS NOT NULL
                ORDER BY t.n
                LIMIT 1
            )
        END
        UNION ALL
        SELECT 5, 'tenant', CASE WHEN tenant IS NOT NULL THEN job.name_problem(tenant) END
        UNION ALL
        SELECT 6, 'unique_key', CASE
            WHEN unique_key IS NOT NULL AND octet_length(unique_key) NOT BETWEEN 1 AND 512
                THEN format('must be 1 to 512 bytes, got %s', octet_length(unique_key))
        END
    ) p
    WHERE p.problem IS NOT NULL
    ORDER BY p.ord
    LIMIT 1
$$;

-- The admission rules as one boolean expression over the columns of a row (`r` is what comes
-- before each column's name: 'NEW.' in a trigger, '' in a function of the columns), with the
-- payload limit written in as a number: built-in operators and constants only, so that it
-- costs no query and no plan wherever it is evaluated. True only when job.admission_problem
-- would find nothing; when it is not true (a rule is broken, or the tags are many or long),
-- job.admission_problem decides.
CREATE FUNCTION job.admission_predicate(r text, payload_limit integer) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT format(
        $p$(octet_length(%1$skind) BETWEEN 1 AND 128 AND %1$skind !~ %2$L
    AND octet_length(%1$squeue) BETWEEN 1 AND 128 AND %1$squeue !~ %2$L
    AND jsonb_typeof(%1$spayload) = 'object'
    AND octet_length(%1$spayload::text) <= %3$s
    AND (%1$stenant IS NULL
         OR (octet_length(%1$stenant) BETWEEN 1 AND 128 AND %1$stenant !~ %2$L))
    AND (%1$sunique_key IS NULL OR octet_length(%1$sunique_key) BETWEEN 1 AND 512)
    AND (cardinality(%1$stags) = 0
         OR (array_ndims(%1$stags) = 1 AND cardinality(%1$stags) <= 32
             AND array_position(%1$stags, NULL) IS NULL AND NOT '' = ANY (%1$stags)
             AND octet_length(array_to_string(%1$stags, '')) <= 128
             AND array_to_string(%1$stags, '') !~ %2$L)))$p$,
        r, job.forbidden_in_names(), payload_limit)
$$;

-- Raises the refusal of a row that the trigger's quick test did not pass, naming the column,
-- unless job.admission_problem finds nothing wrong after all. SECURITY DEFINER, so that a
-- writer needs no privilege on the helper functions (0007 revokes them from PUBLIC); the
-- search_path is pinned, so that a writer cannot put operators of its own before pg_catalog's.
CREATE FUNCTION job.check_admission() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad record;
BEGIN
    SELECT * INTO bad
    FROM job.admission_problem(NEW.kind, NEW.queue, NEW.payload, NEW.tags, NEW.tenant,
                               NEW.unique_key);
    IF FOUND THEN
        RAISE EXCEPTION 'job row refused: `%` %', bad."column", bad.problem
            USING ERRCODE = 'check_violation', COLUMN = bad."column", TABLE = 'jobs',
                  SCHEMA = 'job', CONSTRAINT = 'jobs_admission';
    END IF;
    RETURN NEW;
END
$$;

-- Puts the payload limit of job.settings into effect, at every door, from the next statement
-- on: (re)defines job.quickly_admissible(kind, queue, payload, tags, tenant, unique_key), the
-- test job.enqueue and job.enqueue_many make before they look for a reason, and the trigger
-- `jobs_admission` on job.jobs: on INSERT, and on an UPDATE that sets one of the admitted
-- columns (the claim, heartbeat and finalize set none of them). Its WHEN clause is the
-- predicate itself, which PostgreSQL evaluates for each row without calling any function, so
-- an admissible row costs next to nothing; job.check_admission runs only for the others.
-- Recreating the trigger locks job.jobs against writes until the settings' transaction
-- commits.
CREATE FUNCTION job.apply_settings() RETURNS trigger
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
    EXECUTE 'DROP TRIGGER IF EXISTS jobs_admission ON job.jobs';
    EXECUTE format(
        'CREATE TRIGGER jobs_admission '
        'BEFORE INSERT OR UPDATE OF kind, queue, payload, tags, tenant, unique_key ON job.jobs '
        'FOR EACH ROW WHEN (%s IS NOT TRUE) EXECUTE FUNCTION job.check_admission()',
        job.admission_predicate('NEW.', NEW.payload_limit));
    RETURN NULL;
END
$$;

CREATE TRIGGER settings_apply
    AFTER INSERT OR UPDATE ON job.settings
    FOR EACH ROW
    EXECUTE FUNCTION job.apply_settings();

INSERT INTO job.settings DEFAULT VALUES;

-- Row invariants: every stored time is finite and within 0001-01-01 .. 9999-12-31 UTC, which
-- PostgreSQL, chrono, Python's datetime and JavaScript's Date all represent. Constraints
-- first (NOT VALID: no scan, and every row written from now on is checked), then the clamp
-- under the lock the constraints took, so no writer slips a bad row in between.
ALTER TABLE job.jobs
    ADD CONSTRAINT jobs_run_at_check
        CHECK (run_at >= '0001-01-01 00:00:00+00' AND run_at < '10000-01-01 00:00:00+00')
        NOT VALID,
    ADD CONSTRAINT jobs_deadline_check
        CHECK (deadline >= '0001-01-01 00:00:00+00' AND deadline < '10000-01-01 00:00:00+00')
        NOT VALID,
    ADD CONSTRAINT jobs_created_at_check
        CHECK (created_at >= '0001-01-01 00:00:00+00' AND created_at < '10000-01-01 00:00:00+00')
        NOT VALID,
    ADD CONSTRAINT jobs_finalized_at_check
        CHECK (finalized_at >= '0001-01-01 00:00:00+00'
               AND finalized_at < '10000-01-01 00:00:00+00')
        NOT VALID,
    ADD CONSTRAINT jobs_locked_until_check
        CHECK (locked_until >= '0001-01-01 00:00:00+00'
               AND locked_until < '10000-01-01 00:00:00+00')
        NOT VALID;

-- (least and greatest skip NULLs; a NULL stays NULL through the CASE.)
UPDATE job.jobs
SET run_at       = least(greatest(run_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59.999999+00'),
    deadline     = CASE WHEN deadline IS NOT NULL THEN least(greatest(deadline, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59.999999+00') END,
    created_at   = least(greatest(created_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59.999999+00'),
    finalized_at = CASE WHEN finalized_at IS NOT NULL
                        THEN least(greatest(finalized_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59.999999+00') END,
    locked_until = CASE WHEN locked_until IS NOT NULL
                        THEN least(greatest(locked_until, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59.999999+00') END
WHERE NOT (run_at >= '0001-01-01 00:00:00+00' AND run_at <= '9999-12-31 23:59:59.999999+00')
   OR NOT (deadline >= '0001-01-01 00:00:00+00' AND deadline <= '9999-12-31 23:59:59.999999+00')
   OR NOT (created_at >= '0001-01-01 00:00:00+00' AND created_at <= '9999-12-31 23:59:59.999999+00')
   OR NOT (finalized_at >= '0001-01-01 00:00:00+00' AND finalized_at <= '9999-12-31 23:59:59.999999+00')
   OR NOT (locked_until >= '0001-01-01 00:00:00+00' AND locked_until <= '9999-12-31 23:59:59.999999+00');
$job_migration_0005$;
        INSERT INTO job.schema_migrations (version, name) VALUES (5, 'rules');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 5 AND name = 'rules') THEN
        RAISE EXCEPTION 'job migration 5 is recorded in job.schema_migrations as `%`, but this script''s migration 5 is `rules`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 5);
    END IF;
END
$apply$;
COMMIT;

-- 0006 validate_rules
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 6) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 6 `validate_rules` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 6;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 6 `validate_rules` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 6 applied now could undo what later migrations changed. Apply what migration 6 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0006$
-- 0006 validate rules: checks every stored row against the time constraints that 0005 added
-- NOT VALID (after clamping the rows that broke them). In a transaction of its own, VALIDATE
-- takes only a SHARE UPDATE EXCLUSIVE lock: workers and producers go on writing while the
-- table is scanned. Append-only: change the schema in a new numbered file.

ALTER TABLE job.jobs VALIDATE CONSTRAINT jobs_run_at_check;
ALTER TABLE job.jobs VALIDATE CONSTRAINT jobs_deadline_check;
ALTER TABLE job.jobs VALIDATE CONSTRAINT jobs_created_at_check;
ALTER TABLE job.jobs VALIDATE CONSTRAINT jobs_finalized_at_check;
ALTER TABLE job.jobs VALIDATE CONSTRAINT jobs_locked_until_check;
$job_migration_0006$;
        INSERT INTO job.schema_migrations (version, name) VALUES (6, 'validate_rules');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 6 AND name = 'validate_rules') THEN
        RAISE EXCEPTION 'job migration 6 is recorded in job.schema_migrations as `%`, but this script''s migration 6 is `validate_rules`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 6);
    END IF;
END
$apply$;
COMMIT;

-- 0007 sql_interface
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 7) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 7 `sql_interface` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 7;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 7 `sql_interface` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 7 applied now could undo what later migrations changed. Apply what migration 7 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0007$
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
$job_migration_0007$;
        INSERT INTO job.schema_migrations (version, name) VALUES (7, 'sql_interface');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 7 AND name = 'sql_interface') THEN
        RAISE EXCEPTION 'job migration 7 is recorded in job.schema_migrations as `%`, but this script''s migration 7 is `sql_interface`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 7);
    END IF;
END
$apply$;
COMMIT;

-- 0008 staging
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 8) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 8 `staging` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 8;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 8 `staging` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 8 applied now could undo what later migrations changed. Apply what migration 8 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0008$
-- 0008 staging: a claim whose cost follows what it returns.
--
-- The claim reads only `available` rows, through jobs_claim_idx by queue and kind: one bounded
-- index scan per kind the worker runs, not paused and with room under its limit. Jobs
-- scheduled for later, retries waiting out their backoff, kinds no worker of the queue runs,
-- paused kinds and kinds at their limit are never read by it (with the old queue-wide index a
-- claim walked past every one of them: 62-91 ms a claim over 100,000 such rows).
--
-- `scheduled` and `retryable` rows become `available` when due through the stager
-- (job-postgres/src/sql/stage.sql), which every worker runs every poll interval, reading only
-- due rows through jobs_due_idx. A row keeps its run_at when staged, so its place in the
-- claim's order (priority, run_at, id) is the one it had.
--
-- Creating the indexes locks writes to job.jobs while they build (a migration runs in a
-- transaction, where CREATE INDEX CONCURRENTLY cannot); on a large table, apply it when the
-- queue is quiet. Append-only: change the schema in a new numbered file.

DROP INDEX job.jobs_claim_idx;

CREATE INDEX jobs_claim_idx ON job.jobs (queue, kind, priority, run_at, id)
    WHERE state = 'available';

CREATE INDEX jobs_due_idx ON job.jobs (queue, run_at)
    WHERE state IN ('scheduled', 'retryable');
$job_migration_0008$;
        INSERT INTO job.schema_migrations (version, name) VALUES (8, 'staging');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 8 AND name = 'staging') THEN
        RAISE EXCEPTION 'job migration 8 is recorded in job.schema_migrations as `%`, but this script''s migration 8 is `staging`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 8);
    END IF;
END
$apply$;
COMMIT;

-- 0009 telemetry
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 9) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 9 `telemetry` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 9;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 9 `telemetry` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 9 applied now could undo what later migrations changed. Apply what migration 9 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0009$
-- 0009 telemetry: what operators see of jobs beyond their state.
--
-- `trace_context`: the W3C traceparent of the code that enqueued the job (00-<trace id>-<span
-- id>-<flags>), so that each attempt's span joins that trace. Written at enqueue only.
-- `progress`, `progress_at`: the latest progress its handler reported (a small JSON value,
-- at most 1 KiB of text, MAX_PROGRESS in job-core) and when, written by the lease keeper with
-- its heartbeat (progress_save.sql), guarded by the lease; kept when the job finishes.
-- The CHECKs are on the columns' own values only (cheap on every UPDATE, true while NULL).
--
-- `job.kind_owners`: the team that owns each kind (`#[job(owner = "billing")]`), recorded by
-- the workers that run it, so that dead letters and their gauges show who can act on them.
-- `job.leaders`: one row per role a single worker at a time plays (the reporter of the
-- database-derived gauges), held by a worker until `until` and renewed by it.
--
-- `job.set_trace_context(id, traceparent)`: sets the trace of a job that job.enqueue_unique
-- inserted or replaced; a function, because it runs after enqueue_unique within one
-- statement and must see that function's row (sql/enqueue_unique.sql).
-- Append-only: change the schema in a new numbered file.

ALTER TABLE job.jobs
    ADD COLUMN trace_context text,
    ADD COLUMN progress jsonb,
    ADD COLUMN progress_at timestamptz;

ALTER TABLE job.jobs ADD CONSTRAINT jobs_trace_context_check
    CHECK (trace_context IS NULL OR octet_length(trace_context) = 55);
ALTER TABLE job.jobs ADD CONSTRAINT jobs_progress_check
    CHECK (progress IS NULL OR octet_length(progress::text) <= 2048);

CREATE TABLE job.kind_owners (
    kind       text PRIMARY KEY,
    owner      text NOT NULL CHECK (octet_length(owner) BETWEEN 1 AND 128),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE job.leaders (
    role   text PRIMARY KEY,
    holder text NOT NULL,
    until  timestamptz NOT NULL
);

CREATE FUNCTION job.set_trace_context(job_id bigint, traceparent text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog
AS $$
    UPDATE job.jobs SET trace_context = traceparent WHERE id = job_id RETURNING true
$$;

REVOKE ALL ON FUNCTION job.set_trace_context(bigint, text) FROM PUBLIC;
$job_migration_0009$;
        INSERT INTO job.schema_migrations (version, name) VALUES (9, 'telemetry');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 9 AND name = 'telemetry') THEN
        RAISE EXCEPTION 'job migration 9 is recorded in job.schema_migrations as `%`, but this script''s migration 9 is `telemetry`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 9);
    END IF;
END
$apply$;
COMMIT;

-- 0010 results
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 10) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 10 `results` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 10;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 10 `results` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 10 applied now could undo what later migrations changed. Apply what migration 10 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0010$
-- 0010 results: what a completed attempt returned.
--
-- `result`: the value the handler set (`JobContext::set_result`, or a `#[job]` function's
-- `Ok` value) as JSON, written only by the finalize (finalize.sql) or complete_in.sql that
-- completes the job, and null for every other state. The worker refuses a result over
-- 64 KiB of compact JSON (MAX_RESULT in job-core) before it reaches the database; the CHECK
-- bounds what any writer stores (jsonb's text form spaces its separators, hence twice that).
-- It is on the column's own value only: cheap on every UPDATE, true while NULL; added NOT
-- VALID, since every existing row holds NULL, so the table is not scanned under its lock.
-- Append-only: change the schema in a new numbered file.

ALTER TABLE job.jobs ADD COLUMN result jsonb;

ALTER TABLE job.jobs ADD CONSTRAINT jobs_result_check
    CHECK (result IS NULL OR octet_length(result::text) <= 131072) NOT VALID;
$job_migration_0010$;
        INSERT INTO job.schema_migrations (version, name) VALUES (10, 'results');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 10 AND name = 'results') THEN
        RAISE EXCEPTION 'job migration 10 is recorded in job.schema_migrations as `%`, but this script''s migration 10 is `results`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 10);
    END IF;
END
$apply$;
COMMIT;

-- 0011 pending
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 11) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 11 `pending` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 11;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 11 `pending` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 11 applied now could undo what later migrations changed. Apply what migration 11 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0011$
-- 0011 pending: a state for jobs that wait on something other than time (an earlier job of
-- their ordering key, migration 0012). A state of its own so that no claim, stage or rescue
-- reads them: jobs_claim_idx, jobs_due_idx and jobs_rescue_idx do not hold pending rows.
-- Alone in its migration: a new enum value cannot be used in the transaction that adds it.
-- Append-only: change the schema in a new numbered file.

ALTER TYPE job.job_state ADD VALUE IF NOT EXISTS 'pending' BEFORE 'scheduled';
$job_migration_0011$;
        INSERT INTO job.schema_migrations (version, name) VALUES (11, 'pending');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 11 AND name = 'pending') THEN
        RAISE EXCEPTION 'job migration 11 is recorded in job.schema_migrations as `%`, but this script''s migration 11 is `pending`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 11);
    END IF;
END
$apply$;
COMMIT;

-- 0012 ordering
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 12) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 12 `ordering` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 12;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 12 `ordering` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 12 applied now could undo what later migrations changed. Apply what migration 12 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0012$
-- 0012 ordering: per-key ordering. Jobs with the same `ordering_key` run one at a time, in
-- enqueue order (id order), across every worker; different keys run in parallel. Append-only:
-- change the schema in a new numbered file.
--
-- Of a key's unfinished jobs exactly one, the head, is in a claimable lifecycle (scheduled,
-- available, running or retryable); the others are `pending`, which no claim reads. So the
-- claim is unchanged: it never looks at keys, and jobs without a key pay nothing but a NULL
-- column. The database enforces the rule:
--
-- * jobs_ordering_head_idx, a unique index over the heads, refuses a second head whatever
--   writes it;
-- * the trigger jobs_ordering_admit (BEFORE INSERT, and BEFORE an UPDATE that brings a finished
--   job back, a redrive) makes a keyed row pending when its key has an unfinished job. It first
--   takes the key's transaction-scoped advisory lock, so that two transactions enqueueing one
--   key run that part one after the other, and the second sees the first's row (under READ
--   COMMITTED; a REPEATABLE READ enqueuer that cannot see it is refused by the unique index and
--   retries);
-- * the trigger jobs_ordering_release (AFTER the head finishes, by any path: finalize,
--   complete-in-transaction, rescue, expiry, an operator's cancel, a DELETE) makes the key's
--   oldest pending job the head. It only tries the key's lock: the completer must never wait
--   on an application's open transaction. When the lock is taken (an enqueuer of the key is
--   mid-transaction, or the stager works on the key), it writes the key to the wake-up list
--   instead, and the stager promotes after that transaction has ended.
--
-- A retrying head keeps its key (retryable is a head state): a failed job holds its key's
-- successors until it completes, is cancelled or is discarded; then the next one runs.
--
-- job.ordering_wake: keys whose pending jobs may have no head, written by the release trigger
-- when it could not take the key's lock, and by the admit trigger when it makes a row pending
-- (an enqueuer under REPEATABLE READ may see a head that has since finished); read by the
-- stager (job.ordering_wake_up, called from stage.sql), which promotes a headless key's oldest
-- pending job and forgets the key. No primary key: a writer never waits on another's
-- uncommitted row of the same key, at the price of an occasional duplicate, which the stager
-- forgets with the rest.

ALTER TABLE job.jobs ADD COLUMN ordering_key text;

-- On the column's own value: true while NULL, so free for unkeyed rows. NOT VALID: every
-- existing row holds NULL, so the table is not scanned under its lock.
ALTER TABLE job.jobs ADD CONSTRAINT jobs_ordering_key_check
    CHECK (ordering_key IS NULL OR octet_length(ordering_key) BETWEEN 1 AND 512) NOT VALID;

CREATE UNIQUE INDEX jobs_ordering_head_idx ON job.jobs (ordering_key)
    WHERE ordering_key IS NOT NULL
      AND state IN ('scheduled', 'available', 'running', 'retryable');

CREATE INDEX jobs_ordering_pending_idx ON job.jobs (ordering_key, id)
    WHERE state = 'pending';

CREATE TABLE job.ordering_wake (
    ordering_key text NOT NULL
);

CREATE INDEX ordering_wake_key_idx ON job.ordering_wake (ordering_key);

-- Puts `key` on the wake-up list. `always`: even when this snapshot sees it there, which is
-- what the release trigger needs: when it could not take the key's lock, the stager may be
-- the holder, about to delete the entry it sees. The admit trigger holds the key's lock, so
-- an entry it sees stays until after its commit, and it adds none then.
CREATE FUNCTION job.ordering_wake_later(key text, always boolean) RETURNS void
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO job.ordering_wake (ordering_key)
    SELECT key
    WHERE always
       OR NOT EXISTS (SELECT 1 FROM job.ordering_wake w WHERE w.ordering_key = key)
$$;

-- The key's advisory lock: the same number from every caller. One of 1,024 buckets under a
-- base of the schema's own: every advisory lock takes a slot of the server's shared lock
-- table (max_locks_per_transaction × max_connections, 6,400 by default), so a bulk enqueue of
-- 100,000 distinct keys must not take 100,000 of them; it takes at most 1,024. Two keys in
-- one bucket serialize their enqueuing transactions as one key would, which is all the
-- bucket costs.
CREATE FUNCTION job.ordering_lock_key(ordering_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (hashtextextended('job.ordering', 0) & ~1023::bigint)
           | (hashtextextended(ordering_key, 0) & 1023::bigint)
$$;

-- Makes the oldest pending job of `key` its head, unless it has one. The caller holds the
-- key's lock. Wakes the promoted job's queue (NOTIFY is delivered at commit). Returns whether
-- a job was promoted.
CREATE FUNCTION job.ordering_promote(key text) RETURNS boolean
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

-- BEFORE INSERT, or BEFORE a finished keyed row comes back (redrive): pending when the key
-- has another unfinished job.
CREATE FUNCTION job.ordering_admit() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(job.ordering_lock_key(NEW.ordering_key));
    IF TG_OP = 'INSERT' THEN
        -- The id was drawn before this lock was taken, so a transaction that waited for it
        -- could hold a lower id than the one it waited for. Draw it again: the ids of a key
        -- then follow the order in which their enqueuers took the key's lock, and "enqueue
        -- order" is id order. Rows inserted one after the other in one statement still get
        -- ascending ids (enqueue_many maps ids to inputs by that).
        NEW.id := nextval(pg_get_serial_sequence('job.jobs', 'id'));
    END IF;
    IF EXISTS (SELECT 1 FROM job.jobs o
               WHERE o.ordering_key = NEW.ordering_key AND o.id <> NEW.id
                 AND o.state IN ('pending', 'scheduled', 'available', 'running', 'retryable'))
    THEN
        NEW.state := 'pending';
        PERFORM job.ordering_wake_later(NEW.ordering_key, false);
    END IF;
    RETURN NEW;
END
$$;

-- AFTER a head finishes or is deleted: promotes the key's next job, if the key's lock is free.
CREATE FUNCTION job.ordering_release() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_try_advisory_xact_lock(job.ordering_lock_key(OLD.ordering_key)) THEN
        PERFORM job.ordering_promote(OLD.ordering_key);
    ELSE
        PERFORM job.ordering_wake_later(OLD.ordering_key, true);
    END IF;
    RETURN NULL;
END
$$;

-- Each WHEN is evaluated per row without calling a function: an unkeyed row costs a NULL test.
CREATE TRIGGER jobs_ordering_admit_insert
    BEFORE INSERT ON job.jobs
    FOR EACH ROW WHEN (NEW.ordering_key IS NOT NULL)
    EXECUTE FUNCTION job.ordering_admit();

-- A finished row brought back (redrive), or an unfinished row given a key
-- (job.set_ordering_key).
CREATE TRIGGER jobs_ordering_admit_update
    BEFORE UPDATE OF state, ordering_key ON job.jobs
    FOR EACH ROW WHEN (NEW.ordering_key IS NOT NULL
                       AND NEW.state NOT IN ('completed', 'cancelled', 'discarded')
                       AND (OLD.state IN ('completed', 'cancelled', 'discarded')
                            OR OLD.ordering_key IS DISTINCT FROM NEW.ordering_key))
    EXECUTE FUNCTION job.ordering_admit();

CREATE TRIGGER jobs_ordering_release_finished
    AFTER UPDATE OF state ON job.jobs
    FOR EACH ROW WHEN (OLD.ordering_key IS NOT NULL
                       AND OLD.state IN ('scheduled', 'available', 'running', 'retryable')
                       AND NEW.state IN ('completed', 'cancelled', 'discarded'))
    EXECUTE FUNCTION job.ordering_release();

CREATE TRIGGER jobs_ordering_release_deleted
    AFTER DELETE ON job.jobs
    FOR EACH ROW WHEN (OLD.ordering_key IS NOT NULL
                       AND OLD.state IN ('scheduled', 'available', 'running', 'retryable'))
    EXECUTE FUNCTION job.ordering_release();

-- `job.set_ordering_key(id, key)`: gives the job that job.enqueue_unique inserted its ordering
-- key (sql/enqueue_unique.sql); a function, because it runs after enqueue_unique within one
-- statement and must see that function's row. The admit trigger makes it pending when the key
-- is taken.
CREATE FUNCTION job.set_ordering_key(job_id bigint, key text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog
AS $$
    UPDATE job.jobs SET ordering_key = key WHERE id = job_id RETURNING true
$$;

-- The stager's pass over the wake-up list: up to `max_keys` keys, each promoted if headless
-- and forgotten, skipping keys whose lock another transaction holds (their enqueuer has not
-- committed: the next pass sees them). Returns how many jobs it promoted.
CREATE FUNCTION job.ordering_wake_up(max_keys integer) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    key text;
    promoted integer := 0;
BEGIN
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

-- As every function of the schema: no EXECUTE for PUBLIC. The workers' role needs it on
-- job.ordering_wake_up and job.set_ordering_key (the README's grants); the triggers run as the schema's owner.
REVOKE ALL ON FUNCTION job.ordering_lock_key(text), job.ordering_promote(text),
    job.ordering_wake_later(text, boolean), job.ordering_wake_up(integer), job.ordering_admit(),
    job.ordering_release(), job.set_ordering_key(bigint, text) FROM PUBLIC;
$job_migration_0012$;
        INSERT INTO job.schema_migrations (version, name) VALUES (12, 'ordering');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 12 AND name = 'ordering') THEN
        RAISE EXCEPTION 'job migration 12 is recorded in job.schema_migrations as `%`, but this script''s migration 12 is `ordering`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 12);
    END IF;
END
$apply$;
COMMIT;

-- 0013 dependencies
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 13) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 13 `dependencies` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 13;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 13 `dependencies` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 13 applied now could undo what later migrations changed. Apply what migration 13 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0013$
-- 0013 dependencies: jobs that wait for other jobs, and batches (members and a callback that
-- runs once every member has finished). Append-only: change the schema in a new numbered file.
--
-- A dependent job is inserted, in the enqueuer's transaction, with one row per job it waits
-- for in job.dependencies, and set `pending` (the state no claim reads, migration 0011). The
-- stager resolves (job.dependencies_resolve, called from stage.sql, so within about a poll
-- interval): when every job a dependent waits for has ended as its edge's mode asks, the
-- dependent becomes available (or scheduled, if its run_at is later); when one that had to
-- complete ended cancelled or discarded instead, or no longer exists, the dependent is
-- discarded with class `dependency` naming it, and that discard in turn ends its own
-- dependents on a later pass.
--
-- Why the stager and not a trigger on the finishing job: a finished job cannot tell whether
-- anything waits for it without a lookup, and a row trigger doing that lookup on every
-- completion would tax every job; marking the job instead (a flag set when a dependent is
-- enqueued) would lock it from the enqueuer's transaction and hold up its heartbeat and
-- finalize. The stager reads only unresolved edges (dependencies_open_idx), so jobs without
-- dependencies cost nothing, and no write of the hot path changes.
--
-- No foreign keys: a reference to job.jobs would take a KEY SHARE lock on the job waited for
-- from the enqueuer's transaction, which the finalize's FOR UPDATE would wait on. Edges of a
-- dependent go with it (prune.sql and purge.sql delete them); an edge whose dependency is gone
-- counts as that dependency not having completed.

CREATE TABLE job.dependencies (
    job_id     bigint  NOT NULL,
    depends_on bigint  NOT NULL,
    mode       text    NOT NULL CONSTRAINT dependencies_mode_check
                       CHECK (mode IN ('completed', 'finished')),
    resolved   boolean NOT NULL DEFAULT false,
    PRIMARY KEY (job_id, depends_on)
);

CREATE INDEX dependencies_open_idx ON job.dependencies (depends_on) WHERE NOT resolved;

-- Raises a `check_violation` naming `depends_on` when a job of `ids` does not exist; else true.
CREATE FUNCTION job.dependencies_exist(ids bigint[]) RETURNS boolean
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    missing bigint;
BEGIN
    SELECT i INTO missing
    FROM unnest(ids) AS i
    WHERE NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.id = i)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job row refused: `depends_on` names job %, which does not exist', missing
            USING ERRCODE = 'check_violation', COLUMN = 'depends_on', TABLE = 'jobs',
                  SCHEMA = 'job';
    END IF;
    RETURN true;
END
$$;

-- The stager's pass: up to `max_jobs` dependents with an edge whose job has ended (or is
-- gone), each locked (skipped when someone holds it: the next pass sees it), its ended edges
-- marked resolved, then discarded, promoted or left waiting. Returns how many it discarded or
-- promoted.
CREATE FUNCTION job.dependencies_resolve(max_jobs integer) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dependent bigint;
    failed record;
    woken text;
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
        PERFORM 1 FROM job.jobs j WHERE j.id = dependent FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.id = dependent) THEN
                DELETE FROM job.dependencies d WHERE d.job_id = dependent;
            END IF;
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

-- As every function of the schema: no EXECUTE for PUBLIC. The workers' role needs it on both
-- (the README's grants): enqueueing with dependencies calls the first, the stager the second.
REVOKE ALL ON FUNCTION job.dependencies_exist(bigint[]), job.dependencies_resolve(integer)
    FROM PUBLIC;
$job_migration_0013$;
        INSERT INTO job.schema_migrations (version, name) VALUES (13, 'dependencies');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 13 AND name = 'dependencies') THEN
        RAISE EXCEPTION 'job migration 13 is recorded in job.schema_migrations as `%`, but this script''s migration 13 is `dependencies`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 13);
    END IF;
END
$apply$;
COMMIT;

-- 0014 compensation
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 14) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 14 `compensation` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 14;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 14 `compensation` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 14 applied now could undo what later migrations changed. Apply what migration 14 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0014$
-- 0014 compensation: a kind may name a compensating job, enqueued in the same transaction
-- that discards a job of that kind, so that undoing a partial effect is as durable as the
-- effect. Append-only: change the schema in a new numbered file.
--
-- job.compensations maps a kind to its compensating job's kind and queue. Workers write it
-- for the kinds they run before they claim (`#[job(compensate = RefundCharge)]`, through
-- `Store::register_kinds`), and remove the entry of a kind they run without one. The trigger
-- jobs_compensate fires only when a row becomes `discarded` (its WHEN clause is evaluated
-- without a function call, so other updates pay nothing), by any path: a finalize, the
-- rescuer, the expirer, the dependency resolver, an operator. It inserts the compensating job
-- with a payload `{"discarded": {"job_id", "kind", "payload", "error"}}` (`error`: the last
-- entry of the history, or null), the discarded job's tenant and trace. A discarded payload
-- too large to fit the payload limit with its wrapping is replaced by null (with
-- "payload_omitted": true), and an insert the database still refuses is given up with a
-- WARNING in the server log rather than failing the discard: a compensation must never stop
-- a worker from recording an outcome.

CREATE TABLE job.compensations (
    kind             text PRIMARY KEY CHECK (octet_length(kind) BETWEEN 1 AND 128),
    compensate_kind  text NOT NULL CHECK (octet_length(compensate_kind) BETWEEN 1 AND 128),
    compensate_queue text NOT NULL CHECK (octet_length(compensate_queue) BETWEEN 1 AND 128),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION job.compensate() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    fits boolean;
BEGIN
    SELECT * INTO c FROM job.compensations WHERE kind = NEW.kind;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT octet_length(NEW.payload::text) <= s.payload_limit - 4096 INTO fits
    FROM job.settings s;
    BEGIN
        INSERT INTO job.jobs (kind, queue, payload, tenant, trace_context)
        VALUES (
            c.compensate_kind,
            c.compensate_queue,
            jsonb_build_object('discarded', jsonb_build_object(
                'job_id', NEW.id,
                'kind', NEW.kind,
                'payload', CASE WHEN coalesce(fits, false) THEN NEW.payload END,
                'payload_omitted', NOT coalesce(fits, false),
                'error', NEW.errors -> -1)),
            NEW.tenant,
            NEW.trace_context
        );
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'job %: compensating job % not enqueued: %', NEW.id, c.compensate_kind,
            SQLERRM;
    END;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_compensate
    AFTER UPDATE OF state ON job.jobs
    FOR EACH ROW WHEN (NEW.state = 'discarded' AND OLD.state IS DISTINCT FROM 'discarded')
    EXECUTE FUNCTION job.compensate();

REVOKE ALL ON FUNCTION job.compensate() FROM PUBLIC;
$job_migration_0014$;
        INSERT INTO job.schema_migrations (version, name) VALUES (14, 'compensation');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 14 AND name = 'compensation') THEN
        RAISE EXCEPTION 'job migration 14 is recorded in job.schema_migrations as `%`, but this script''s migration 14 is `compensation`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 14);
    END IF;
END
$apply$;
COMMIT;

-- 0015 flow_control
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 15) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 15 `flow_control` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 15;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 15 `flow_control` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 15 applied now could undo what later migrations changed. Apply what migration 15 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0015$
-- 0015 flow control: rate limits and circuit breakers. Append-only: change the schema in a
-- new numbered file.
--
-- Rate limits (`#[job(rate = "100/1m")]`): at most N attempts of a kind start in any window
-- of its period, across every worker; with a rate key (`rate_key = "tenant:{tenant_id}"`),
-- each key of the kind has a window of its own, and jobs without a key share one.
-- job.rate_windows keeps, per (kind, key) ('' for no key), the start times of the last
-- window, oldest first: at most N of them (N is at most 10,000, checked by the worker). Claims
-- of a rate-limited kind run claim_rated.sql under the kind's advisory lock (claim_lock.sql),
-- which reads each key's room at clock_timestamp() (after the lock was granted, so every
-- earlier claim of the kind has committed its starts), claims at most that many of the key's
-- jobs and appends their starts in the same statement.
CREATE TABLE job.rate_windows (
    kind       text NOT NULL CHECK (octet_length(kind) BETWEEN 1 AND 128),
    rate_key   text NOT NULL DEFAULT '' CHECK (octet_length(rate_key) <= 512),
    starts     timestamptz[] NOT NULL DEFAULT '{}'
               CHECK (cardinality(starts) <= 10000),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, rate_key)
);

-- Where the next claim of a rate-limited kind in a queue starts looking for keys with waiting
-- jobs: a claim reads at most 256 keys, after this one and then from the first (round robin).
CREATE TABLE job.rate_cursors (
    kind      text NOT NULL CHECK (octet_length(kind) BETWEEN 1 AND 128),
    queue     text NOT NULL CHECK (octet_length(queue) BETWEEN 1 AND 128),
    after_key text NOT NULL CHECK (octet_length(after_key) <= 512),
    PRIMARY KEY (kind, queue)
);

-- A job's rate key. NOT VALID: no existing row has one, and validating would read the table.
ALTER TABLE job.jobs ADD COLUMN rate_key text;
ALTER TABLE job.jobs ADD CONSTRAINT jobs_rate_key_check
    CHECK (rate_key IS NULL OR octet_length(rate_key) BETWEEN 1 AND 512) NOT VALID;

-- The available jobs that have a rate key, by queue, kind and key in claim order: the claim of
-- a rate-limited kind finds each key with waiting jobs by one probe (a loose index scan) and
-- reads only the jobs its room takes, so a key at its limit costs nothing however many jobs it
-- has waiting. Rows without a rate key are not in it (jobs_claim_idx has them).
CREATE INDEX jobs_rate_key_idx ON job.jobs (queue, kind, rate_key, priority, run_at, id)
    WHERE state = 'available' AND rate_key IS NOT NULL;

-- Gives job `job_id` its rate key, from the statement that inserted it through
-- job.enqueue_unique (as job.set_ordering_key).
CREATE FUNCTION job.set_rate_key(job_id bigint, key text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog
AS $$
    UPDATE job.jobs SET rate_key = key WHERE id = job_id RETURNING true
$$;
REVOKE ALL ON FUNCTION job.set_rate_key(bigint, text) FROM PUBLIC;

-- Circuit breakers (`#[job(breaker(failure_percent = 50, ...))]`): one row per kind with a
-- breaker, counting the attempts that ended in the current window and how many failed.
-- Workers add their counts after each batch of outcomes (breaker_record.sql), which also
-- writes the breaker's settings (every worker of a kind must agree on them), starts a new
-- window when the current one is over, and trips the breaker: it pauses the kind until
-- `now() + cool_down` with the reason, and starts the counts again.
CREATE TABLE job.breakers (
    kind            text PRIMARY KEY CHECK (octet_length(kind) BETWEEN 1 AND 128),
    failure_percent smallint NOT NULL CHECK (failure_percent BETWEEN 1 AND 100),
    min_attempts    integer NOT NULL CHECK (min_attempts BETWEEN 1 AND 1000000),
    window_ms       bigint NOT NULL CHECK (window_ms BETWEEN 1000 AND 2592000000),
    cool_down_ms    bigint NOT NULL CHECK (cool_down_ms BETWEEN 1000 AND 2592000000),
    window_start    timestamptz NOT NULL DEFAULT now(),
    attempts        bigint NOT NULL DEFAULT 0,
    failures        bigint NOT NULL DEFAULT 0,
    trips           bigint NOT NULL DEFAULT 0,
    tripped_at      timestamptz
);

-- A pause says who made it and why, and may end by itself: a breaker's pause ends at
-- `resume_at` (the claim ignores a pause whose `resume_at` has passed; the next trip or an
-- operator's pause overwrites it). An operator's pause has no end.
ALTER TABLE job.pauses
    ADD COLUMN paused_by text NOT NULL DEFAULT 'operator'
        CONSTRAINT pauses_paused_by_check CHECK (paused_by IN ('operator', 'breaker')),
    ADD COLUMN reason text
        CONSTRAINT pauses_reason_check CHECK (octet_length(reason) <= 1024),
    ADD COLUMN resume_at timestamptz;

-- SECURITY DEFINER (every object schema-qualified, search_path pinned): a worker role needs
-- EXECUTE on it, and no write privilege on job.breakers or job.pauses.
--
-- Adds ended attempts to the breakers of kinds (p_kinds, with the attempts and failures
-- counted by a worker and the breaker's settings as that worker has them, in lockstep),
-- and returns the kinds it tripped, with the reason and when the pause ends. Kinds are
-- handled in name order, so two workers' calls never deadlock on the rows. A window that is
-- over starts again at zero. A breaker trips when its window has counted at least
-- min_attempts attempts with failure_percent of them failed: the counts start again, and the
-- kind is paused until now() + cool_down, unless an operator paused it (that pause stays, and
-- nothing is returned) or a breaker pause is still in force.
CREATE FUNCTION job.breaker_record(
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
BEGIN
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
            attempts        = CASE WHEN now() >= b.window_start + b.window_ms * interval '1 millisecond'
                                   THEN 0 ELSE b.attempts END + excluded.attempts,
            failures        = CASE WHEN now() >= b.window_start + b.window_ms * interval '1 millisecond'
                                   THEN 0 ELSE b.failures END + excluded.failures
        RETURNING * INTO cur;

        CONTINUE WHEN cur.attempts < cur.min_attempts
                   OR cur.failures * 100 < cur.failure_percent::bigint * cur.attempts;

        why := format('circuit breaker: %s of %s attempts failed (%s%%) in the window since %s; '
                      'it trips at %s%% of at least %s attempts per %s ms',
                      cur.failures, cur.attempts, cur.failures * 100 / cur.attempts,
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
            trips = trips + least(written, 1),
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

REVOKE ALL ON FUNCTION job.breaker_record(text[], bigint[], bigint[], smallint[], integer[],
                                          bigint[], bigint[]) FROM PUBLIC;
$job_migration_0015$;
        INSERT INTO job.schema_migrations (version, name) VALUES (15, 'flow_control');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 15 AND name = 'flow_control') THEN
        RAISE EXCEPTION 'job migration 15 is recorded in job.schema_migrations as `%`, but this script''s migration 15 is `flow_control`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 15);
    END IF;
END
$apply$;
COMMIT;

-- 0016 pending_unique
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 16) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 16 `pending_unique` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 16;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 16 `pending_unique` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 16 applied now could undo what later migrations changed. Apply what migration 16 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0016$
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
$job_migration_0016$;
        INSERT INTO job.schema_migrations (version, name) VALUES (16, 'pending_unique');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 16 AND name = 'pending_unique') THEN
        RAISE EXCEPTION 'job migration 16 is recorded in job.schema_migrations as `%`, but this script''s migration 16 is `pending_unique`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 16);
    END IF;
END
$apply$;
COMMIT;

-- 0017 finished_indexes
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 17) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 17 `finished_indexes` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 17;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 17 `finished_indexes` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 17 applied now could undo what later migrations changed. Apply what migration 17 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0017$
-- 0017 the pruner reads only what it deletes. Append-only: change the schema in a new
-- numbered file.
--
-- jobs_finalized_idx (migration 0001) held every finished row, dead letters included, and
-- prune.sql's one condition over it (completed past one retention, or cancelled past
-- another) gave it no index condition: every pass walked every finished row, the dead letters
-- kept until purged and the jobs still within their retention alike (with 200,000 dead
-- letters and 105,000 finished jobs, a pass with nothing to delete read 305,000 rows in
-- 54-92 ms, every 10 s on every worker; now none, in 0.3-0.4 ms). Each state the pruner
-- deletes has an index of its own, which prune.sql reads up to that state's cutoff; dead
-- letters are only in jobs_discarded_idx (migration 0002). A finished row still enters one of
-- these indexes (a discarded one: one instead of two), so a finalize does no more index work
-- than before.
--
-- What read finished jobs by time whatever their state reads each state's index and merges
-- (inspect_overview.sql's recently finished jobs, job_filter.sql's finalized range).
--
-- Creating the indexes locks writes to job.jobs while they build (a migration runs in a
-- transaction, where CREATE INDEX CONCURRENTLY cannot); on a large table, apply it when the
-- queue is quiet.

DROP INDEX job.jobs_finalized_idx;

-- Completed jobs by when they finished: the pruner's completed retention.
CREATE INDEX jobs_completed_idx ON job.jobs (finalized_at)
    WHERE state = 'completed';

-- Cancelled jobs by when they finished: the pruner's cancelled retention.
CREATE INDEX jobs_cancelled_idx ON job.jobs (finalized_at)
    WHERE state = 'cancelled';
$job_migration_0017$;
        INSERT INTO job.schema_migrations (version, name) VALUES (17, 'finished_indexes');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 17 AND name = 'finished_indexes') THEN
        RAISE EXCEPTION 'job migration 17 is recorded in job.schema_migrations as `%`, but this script''s migration 17 is `finished_indexes`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 17);
    END IF;
END
$apply$;
COMMIT;

-- 0018 step_output_bound
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 18) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 18 `step_output_bound` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 18;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 18 `step_output_bound` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 18 applied now could undo what later migrations changed. Apply what migration 18 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0018$
-- 0018 a step's output is bounded in the table, as a result and a progress report are.
-- Append-only: change the schema in a new numbered file.
--
-- The worker refuses a step output over 1 MiB, measured as jsonb stores it (MAX_STEP_OUTPUT
-- and json_size::stored_len in job-core), before the database sees it; until now nothing but
-- that check bounded job.steps.output, so any other writer could store any size. The CHECK
-- bounds what every writer stores, at twice the worker's limit as jobs_result_check does
-- (jsonb's text form spaces its separators). It is on the inserted value only: added NOT
-- VALID, so the table is not scanned under its lock (rows already there were written through
-- the worker's limit).

ALTER TABLE job.steps ADD CONSTRAINT steps_output_check
    CHECK (octet_length(output::text) <= 2097152) NOT VALID;
$job_migration_0018$;
        INSERT INTO job.schema_migrations (version, name) VALUES (18, 'step_output_bound');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 18 AND name = 'step_output_bound') THEN
        RAISE EXCEPTION 'job migration 18 is recorded in job.schema_migrations as `%`, but this script''s migration 18 is `step_output_bound`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 18);
    END IF;
END
$apply$;
COMMIT;

-- 0019 dependency_hold
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 19) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 19 `dependency_hold` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 19;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 19 `dependency_hold` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 19 applied now could undo what later migrations changed. Apply what migration 19 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0019$
-- 0019 a job waited for is held until its dependent's enqueue commits.
-- Append-only: change the schema in a new numbered file.
--
-- job.dependencies_exist checked that the jobs waited for exist, and held nothing: the pruner,
-- which keeps a job that an unresolved edge points at, could not see the edge before the
-- enqueue committed, and deleted a completed dependency in between; the stager then discarded
-- the dependent ("was deleted") although what it waited for had completed. The check now
-- takes FOR KEY SHARE on the rows, in id order, until the enqueue's transaction ends, as a
-- foreign key would: it forbids only deleting them. The pruner's FOR UPDATE SKIP LOCKED
-- passes them by, a purge waits. Every statement that only updates a job (claim, heartbeat,
-- finalize, release, rescue, stage, expire) locks FOR NO KEY UPDATE, which does not conflict
-- with it, so an application's open transaction holds up none of them. (The stager's
-- job.dependencies_resolve still locks a dependent FOR UPDATE SKIP LOCKED: a pending job
-- waited for by an enqueue still open is resolved once that enqueue ends.)
-- A row deleted while the check waited for it is missing, and refused as before. VOLATILE, so
-- that the second statement sees what the first waited for (sql/dependencies_add.sql calls
-- it once, as a subquery).

CREATE OR REPLACE FUNCTION job.dependencies_exist(ids bigint[]) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    missing bigint;
BEGIN
    PERFORM 1 FROM job.jobs j WHERE j.id = ANY (ids) ORDER BY j.id FOR KEY SHARE OF j;
    SELECT i INTO missing
    FROM unnest(ids) AS i
    WHERE NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.id = i)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job row refused: `depends_on` names job %, which does not exist', missing
            USING ERRCODE = 'check_violation', COLUMN = 'depends_on', TABLE = 'jobs',
                  SCHEMA = 'job';
    END IF;
    RETURN true;
END
$$;
$job_migration_0019$;
        INSERT INTO job.schema_migrations (version, name) VALUES (19, 'dependency_hold');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 19 AND name = 'dependency_hold') THEN
        RAISE EXCEPTION 'job migration 19 is recorded in job.schema_migrations as `%`, but this script''s migration 19 is `dependency_hold`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 19);
    END IF;
END
$apply$;
COMMIT;

-- 0020 sql_keys
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 20) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 20 `sql_keys` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 20;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 20 `sql_keys` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 20 applied now could undo what later migrations changed. Apply what migration 20 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0020$
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
$job_migration_0020$;
        INSERT INTO job.schema_migrations (version, name) VALUES (20, 'sql_keys');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 20 AND name = 'sql_keys') THEN
        RAISE EXCEPTION 'job migration 20 is recorded in job.schema_migrations as `%`, but this script''s migration 20 is `sql_keys`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 20);
    END IF;
END
$apply$;
COMMIT;

-- 0021 claim_function
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 21) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 21 `claim_function` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 21;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 21 `claim_function` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 21 applied now could undo what later migrations changed. Apply what migration 21 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0021$
-- 0021 claim function: the claim statement (formerly the text of sql/claim.sql, sent by the
-- store with each claim) becomes job.claim, a PL/pgSQL function that returns the same rows.
-- Append-only: change the schema in a new numbered file.
--
-- Why a function: PostgreSQL plans a statement sent with parameters anew for every execution
-- while it estimates that plan cheaper than a generic one, and for this statement it mostly
-- does (the generic plan cannot know the claim's LIMIT): a drain of 50,000 jobs planned all
-- 251 of its claims anew. Planning took about 0.9 ms, as long as executing a claim of 50
-- jobs, and most of an idle worker's claim of one. The
-- statement is one bounded index scan per kind whatever the parameters (the plan has no other
-- shape to choose), so the function plans it once per connection: `plan_cache_mode =
-- force_generic_plan` applies to its own statement only, not to the caller's session.
--
-- The function runs with its caller's privileges (SECURITY INVOKER): a role needs the same
-- table privileges to claim as before, and EXECUTE is left to PUBLIC so that a worker role
-- granted those table privileges (README, "Roles and privileges") needs nothing new.
-- search_path is pinned and every object schema-qualified.
--
-- The rows picked are locked (FOR NO KEY UPDATE) until the statement's UPDATE rewrites them,
-- so their ctid cannot change in between: the UPDATE reaches each by its ctid, not through
-- the primary key's index.
--
-- Parameters, as the statement's $1..$8 were: the queue; per kind in lockstep (kinds, versions,
-- leases, caps) its name, newest payload version, lease in milliseconds and cluster-wide
-- limit of running jobs (null: none); the most jobs to claim; the worker's id; the
-- rate-limited kinds of the queue to stay ahead of (empty: none).
--
-- Claims up to $5 available jobs of queue $1 for worker $6 in one statement. Per kind (arrays
-- $2..$4, $7 in lockstep): name, newest payload version, lease in milliseconds, and the
-- cluster-wide limit of running jobs (null: none). Skipped: paused queues and kinds
-- (job.pauses; a breaker's pause until its resume_at), jobs past their deadline (the pruner
-- discards them), jobs whose cancellation
-- was requested (the pruner cancels them). A limited kind takes at most its limit minus its
-- running jobs: the caller holds that kind's advisory lock (claim_lock.sql) in the same
-- transaction, taken in an earlier statement so that this one's snapshot sees every claim made
-- before it.
--
-- Only `available` rows are read (due `scheduled` and `retryable` ones are made available by
-- stage.sql), one bounded scan of jobs_claim_idx per kind that may run: what a claim reads
-- follows what it returns, whatever waits for later, for kinds this worker does not run, for
-- paused kinds or for kinds at their limit. The scans' rows are merged in the claim's order
-- (priority, run_at, id). A unique key held 'started' is spent by the claim.
--
-- $8: rate-limited kinds of the same queue, which claim_rated.sql claims after this statement
-- (empty: none). Only jobs ahead of their first waiting job in claim order are taken then, so
-- that a limited kind's jobs keep their place among the others' instead of coming after them
-- (or before them, were the limited kinds claimed first); lease.rs claims the other kinds
-- again, without the bound, with what the limited kinds left of the limit. The bound is a
-- condition of each kind's index scan (a row comparison on jobs_claim_idx's columns after
-- queue and kind), so the scan stops at it rather than reading the jobs behind it; without
-- $8 it is past every row.

CREATE FUNCTION job.claim(
    in_queue text, in_kinds text[], in_versions integer[], in_leases bigint[],
    in_max integer, in_worker text, in_caps integer[], in_ahead_of text[]
) RETURNS TABLE (
    id bigint, lock_token uuid, kind text, queue text, priority smallint, payload text,
    payload_version integer, attempt integer, max_attempts integer, snoozes integer,
    trace_context text, waited_ms bigint
)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH bound AS MATERIALIZED (
        SELECT coalesce(h.priority, 32767::smallint) AS priority,
               coalesce(h.run_at, 'infinity'::timestamptz) AS run_at,
               coalesce(h.id, 9223372036854775807) AS id
        FROM (SELECT 1) AS one
        LEFT JOIN LATERAL (
            SELECT f.priority, f.run_at, f.id
            FROM unnest($8::text[]) AS r(kind)
            CROSS JOIN LATERAL (
                SELECT j.priority, j.run_at, j.id
                FROM job.jobs j
                WHERE j.queue = $1::text
                  AND j.kind = r.kind
                  AND j.state = 'available'
                ORDER BY j.priority, j.run_at, j.id
                LIMIT 1
            ) f
            ORDER BY 1, 2, 3
            LIMIT 1
        ) h ON true
    ),
    k AS (
        SELECT k.kind, k.version, k.cap
        FROM unnest($2::text[], $3::integer[], $7::integer[]) AS k(kind, version, cap)
        WHERE NOT EXISTS (SELECT 1 FROM job.pauses p
                          WHERE p.scope = 'kind' AND p.name = k.kind
                            AND (p.resume_at IS NULL OR p.resume_at > now()))
          AND NOT EXISTS (SELECT 1 FROM job.pauses p
                          WHERE p.scope = 'queue' AND p.name = $1::text
                            AND (p.resume_at IS NULL OR p.resume_at > now()))
    ),
    -- Running rows of a limited kind are counted through jobs_rescue_idx (locked_until IS NOT
    -- NULL is running, by jobs_lease_check): no extra index on the hot path.
    room AS MATERIALIZED (
        SELECT k.kind, k.version,
               CASE WHEN k.cap IS NULL THEN $5::integer
                    ELSE least($5::integer,
                               k.cap - (SELECT count(*) FROM job.jobs r
                                        WHERE r.locked_until IS NOT NULL AND r.kind = k.kind)::integer)
               END AS room,
               bound.priority AS before_priority, bound.run_at AS before_run_at,
               bound.id AS before_id
        FROM k
        CROSS JOIN bound
    ),
    picked AS (
        SELECT c.tid, c.id, c.priority, c.run_at
        FROM room
        CROSS JOIN LATERAL (
            SELECT j.ctid AS tid, j.id, j.priority, j.run_at
            FROM job.jobs j
            WHERE j.queue = $1::text
              AND j.kind = room.kind
              AND j.state = 'available'
              AND (j.priority, j.run_at, j.id)
                  < (room.before_priority, room.before_run_at, room.before_id)
              AND j.run_at <= now()
              AND j.payload_version <= room.version
              AND (j.deadline IS NULL OR j.deadline > now())
              AND NOT j.cancel_requested
            ORDER BY j.priority, j.run_at, j.id
            LIMIT room.room
            FOR NO KEY UPDATE SKIP LOCKED
        ) c
        WHERE room.room > 0
        ORDER BY c.priority, c.run_at, c.id
        LIMIT $5::integer
    ),
    claimed AS (
        UPDATE job.jobs j
        SET state        = 'running',
            attempt      = j.attempt + 1,
            lock_token   = gen_random_uuid(),
            locked_by    = $6::text,
            locked_until = now()
                + ($4::bigint[])[array_position($2::text[], j.kind)] * interval '1 millisecond',
            unique_scope = CASE WHEN j.unique_scope = 'started' THEN 'spent' ELSE j.unique_scope END
        FROM picked
        WHERE j.ctid = picked.tid
        RETURNING j.id, j.lock_token, j.kind, j.queue, j.priority, j.payload, j.payload_version,
                  j.attempt, j.max_attempts, j.snoozes, j.run_at, j.trace_context
    )
    SELECT id, lock_token, kind, queue, priority, payload::text AS payload, payload_version,
           attempt, max_attempts, snoozes, trace_context,
           greatest(0, extract(epoch FROM now() - run_at) * 1000)::bigint AS waited_ms
    FROM claimed
    ORDER BY priority, run_at, id;
END
$claim$;
$job_migration_0021$;
        INSERT INTO job.schema_migrations (version, name) VALUES (21, 'claim_function');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 21 AND name = 'claim_function') THEN
        RAISE EXCEPTION 'job migration 21 is recorded in job.schema_migrations as `%`, but this script''s migration 21 is `claim_function`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 21);
    END IF;
END
$apply$;
COMMIT;

-- 0022 door_bounds
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 22) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 22 `door_bounds` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 22;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 22 `door_bounds` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 22 applied now could undo what later migrations changed. Apply what migration 22 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0022$
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
$job_migration_0022$;
        INSERT INTO job.schema_migrations (version, name) VALUES (22, 'door_bounds');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 22 AND name = 'door_bounds') THEN
        RAISE EXCEPTION 'job migration 22 is recorded in job.schema_migrations as `%`, but this script''s migration 22 is `door_bounds`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 22);
    END IF;
END
$apply$;
COMMIT;

-- 0023 dependency_wake
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 23) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 23 `dependency_wake` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 23;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 23 `dependency_wake` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 23 applied now could undo what later migrations changed. Apply what migration 23 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0023$
-- 0023 dependency wake-ups: the stager's resolution of dependents reads what ended, not every
-- open edge. Append-only: change the schema in a new numbered file.
--
-- job.dependencies_resolve (migration 0013) found the dependents to resolve by joining every
-- unresolved edge to the job it waits for, on every pass of every worker's stager (about once
-- a second each): with 100,000 open edges whose jobs were still waiting or running, a pass
-- read 100,000 edges and as many jobs to find nothing, about 60 ms of the server's CPU per
-- worker per second. Now a pass reads what changed:
--
-- * job.jobs.awaited marks a job that an unresolved edge points at, and jobs_awaited_idx
--   holds such jobs once they have ended (completed, cancelled, discarded). Every statement
--   that ends a job (finalize, cancel, rescue, expire, prune's discards, raw SQL) puts it
--   there by its own UPDATE, with no trigger and no change to those statements; a job nobody
--   waits for is never in the index, so the hot path pays one predicate test per row.
-- * The flag is set by the stager, not by the enqueue: setting it there would lock the job
--   waited for (an UPDATE's FOR NO KEY UPDATE) until the application's transaction ends, and
--   a running job's heartbeat and finalize would wait for it (migration 0019 took FOR KEY
--   SHARE only, for this reason). New edges are `flagged = false` (jobs_dependencies_fresh_idx):
--   each pass flags up to its limit of them, skipping jobs someone holds (tried again on the
--   next pass). A job that had already ended when flagged enters jobs_awaited_idx at once.
-- * The pass then resolves the dependents of ended, awaited jobs (the same per-dependent steps
--   as before, unchanged) and clears the flag of ended jobs that no open edge points at any
--   longer.
-- * A job waited for that is deleted (a purge of dead letters, raw SQL; the pruner keeps
--   such jobs) leaves no ended row behind to find: a sweep, the old full read, runs at most
--   once a minute across the cluster (job.dependency_sweep, claimed FOR UPDATE SKIP LOCKED),
--   and an edge whose job is missing when it is flagged is resolved at once.
--
-- Existing open edges start unflagged and are flagged over the first passes after the upgrade.
-- ADD COLUMN with a constant default does not rewrite the table; the CREATE INDEXes read it
-- once (in this migration's transaction, where CREATE INDEX CONCURRENTLY cannot run; on a
-- large table, apply it when writes can wait that long).

ALTER TABLE job.jobs ADD COLUMN awaited boolean NOT NULL DEFAULT false;
ALTER TABLE job.dependencies ADD COLUMN flagged boolean NOT NULL DEFAULT false;

CREATE INDEX jobs_awaited_idx ON job.jobs (id)
    WHERE awaited AND state IN ('completed', 'cancelled', 'discarded');
CREATE INDEX dependencies_fresh_idx ON job.dependencies (depends_on)
    WHERE NOT flagged AND NOT resolved;

-- One row: when the last sweep started.
CREATE TABLE job.dependency_sweep (
    one boolean     PRIMARY KEY DEFAULT true CONSTRAINT dependency_sweep_one_check CHECK (one),
    at  timestamptz NOT NULL CONSTRAINT dependency_sweep_at_check
                    CHECK (at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
);
INSERT INTO job.dependency_sweep (at) VALUES ('2000-01-01 00:00:00+00');

CREATE OR REPLACE FUNCTION job.dependencies_resolve(max_jobs integer) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dependent bigint;
    candidates bigint[];
    failed record;
    woken text;
    okey text;
    changed integer := 0;
BEGIN
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
$job_migration_0023$;
        INSERT INTO job.schema_migrations (version, name) VALUES (23, 'dependency_wake');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 23 AND name = 'dependency_wake') THEN
        RAISE EXCEPTION 'job migration 23 is recorded in job.schema_migrations as `%`, but this script''s migration 23 is `dependency_wake`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 23);
    END IF;
END
$apply$;
COMMIT;

-- 0024 jit_off
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 24) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 24 `jit_off` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 24;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 24 `jit_off` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 24 applied now could undo what later migrations changed. Apply what migration 24 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0024$
-- 0024 no JIT compilation of the claim and the stager's functions.
-- Append-only: change the schema in a new numbered file.
--
-- PostgreSQL compiles a statement with LLVM when its plan's estimated cost exceeds
-- jit_above_cost (100,000 by default, and JIT is on by default). job.claim's statement is
-- planned once per connection as a generic plan (migration 0021), whose estimate includes the
-- count of a limited kind's running rows as a scan of the whole table even when no kind is
-- limited: with 300,000 running, 300,000 scheduled and 300,000 completed rows, that estimate
-- passed the threshold and every claim of 10 jobs spent 35 ms compiling (auto_explain: "JIT:
-- Functions: 69 ... Total 35.714 ms"), 39-65 ms a claim against under 1 ms without. A claim,
-- a stage pass and their functions are short statements that never gain from compiling. The
-- worker's own connections are opened with JIT off as well (job_postgres::Store::dedicated),
-- which covers its plain statements (stage, rescue, finalize, ...); this covers the functions
-- whoever calls them.

ALTER FUNCTION job.claim(text, text[], integer[], bigint[], integer, text, integer[], text[])
    SET jit = off;
ALTER FUNCTION job.dependencies_resolve(integer) SET jit = off;
ALTER FUNCTION job.ordering_wake_up(integer) SET jit = off;
ALTER FUNCTION job.ordering_promote(text) SET jit = off;
$job_migration_0024$;
        INSERT INTO job.schema_migrations (version, name) VALUES (24, 'jit_off');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 24 AND name = 'jit_off') THEN
        RAISE EXCEPTION 'job migration 24 is recorded in job.schema_migrations as `%`, but this script''s migration 24 is `jit_off`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 24);
    END IF;
END
$apply$;
COMMIT;

-- 0025 raw_bounds
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 25) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 25 `raw_bounds` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 25;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 25 `raw_bounds` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 25 applied now could undo what later migrations changed. Apply what migration 25 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0025$
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
$job_migration_0025$;
        INSERT INTO job.schema_migrations (version, name) VALUES (25, 'raw_bounds');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 25 AND name = 'raw_bounds') THEN
        RAISE EXCEPTION 'job migration 25 is recorded in job.schema_migrations as `%`, but this script''s migration 25 is `raw_bounds`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 25);
    END IF;
END
$apply$;
COMMIT;

-- 0026 running_by_kind
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 26) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 26 `running_by_kind` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 26;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 26 `running_by_kind` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 26 applied now could undo what later migrations changed. Apply what migration 26 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0026$
-- 0026 running jobs by kind: a claim of a kind with a concurrency limit counts that kind's
-- running jobs, not every running job. Append-only: change the schema in a new numbered file.
--
-- job.claim and claim_rated.sql count a limited kind's running rows to know its room. Through
-- jobs_rescue_idx (locked_until) that count read every running row of every kind: with
-- 300,000 jobs running (or held by prefetching workers, or with leases run out and not yet
-- rescued), a claim of a limited kind took 52-94 ms, on every claim, whatever it returned.
-- Keyed by kind first, the count is a range of the index holding that kind's running rows
-- only (about its limit): 2 rows read there, in under a millisecond.
--
-- The other readers of the index follow its new order: the rescuer walks the kinds that have
-- running rows (one index probe each) and takes each kind's expired leases, oldest first, up to
-- its batch (job.rescue_expired, below); the dashboard's overview counts running rows in index
-- order (inspect_overview.sql). What counts every running row (the reporter's gauges,
-- check_leases.sql) reads the same rows as before. A claim or a heartbeat writes one entry, as
-- before; the raw claim + finalize loop of job-bench measured no difference (4 alternating
-- pairs of 30,000-job drains, within this machine's noise).
--
-- Rebuilding the index locks writes to job.jobs while it builds (a migration runs in a
-- transaction, where CREATE INDEX CONCURRENTLY cannot); it holds running rows only, but the
-- build reads the table: on a large table, apply it when the queue is quiet.

DROP INDEX job.jobs_rescue_idx;

CREATE INDEX jobs_rescue_idx ON job.jobs (kind, locked_until)
    WHERE locked_until IS NOT NULL;

-- The rescuer's statement (formerly the text of sql/rescue_expired.sql, which now calls this).
-- Recovers up to in_limit expired leases (running and locked_until before the database's now),
-- and only those, skipping rows someone holds (a heartbeat renewing one right now). Attempts
-- exhausted: discarded; else retryable, the attempt counted, keeping its run_at: it was due when
-- it was claimed, so it is due now and keeps its place ahead of jobs that became due after it
-- (a rescued job does not queue behind the backlog). Appends a lease_expired error naming the
-- worker (through job.push_error), clears the lease and stuck_since, and wakes the queues it
-- refilled.
--
-- The expired leases are found per kind: a loose scan of jobs_rescue_idx lists the kinds that
-- have running rows (one probe each), and each kind's expired leases are read oldest first
-- until the batch is full. What a pass reads is the leases it takes plus one probe per kind,
-- however many leases are live.
--
-- Why a function: a kind's leases must be read in the index's order, so that the scan stops at
-- the batch. Given a kind's expired rows in a heap order the planner rates poorly, its custom
-- plan chose a bitmap scan of every expired row of the kind and a sort (5,102 rows read to
-- rescue 100 in tests/store_claim.rs). `enable_bitmapscan = off` for this statement only
-- leaves the ordered index scan as the plan, whatever the statistics. Like job.claim, it runs
-- with its caller's privileges (SECURITY INVOKER), EXECUTE left to PUBLIC, search_path pinned,
-- no JIT (migration 0024's reasons).
CREATE FUNCTION job.rescue_expired(in_limit integer)
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
        SET state        = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded'
                                ELSE 'retryable' END::job.job_state,
            finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
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
$job_migration_0026$;
        INSERT INTO job.schema_migrations (version, name) VALUES (26, 'running_by_kind');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 26 AND name = 'running_by_kind') THEN
        RAISE EXCEPTION 'job migration 26 is recorded in job.schema_migrations as `%`, but this script''s migration 26 is `running_by_kind`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 26);
    END IF;
END
$apply$;
COMMIT;

-- 0027 stopping_rows
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 27) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 27 `stopping_rows` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 27;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 27 `stopping_rows` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 27 applied now could undo what later migrations changed. Apply what migration 27 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0027$
-- 0027 rows that stopped everyone: three raw writes that every door let in, after which a
-- statement the framework runs for every job of a queue (or of the database) failed, on every
-- pass. Append-only: change the schema in a new numbered file.
--
-- 1. A waiting row at `attempt` 2,147,483,646 (the largest jobs_attempt_check leaves a
--    waiting row): the claim counts the attempt, writes 2,147,483,647, which the check
--    refuses, and the whole claim of the row's queue failed, whatever else it picked. The
--    claim now passes over such a row (job.claim here, claim_rated.sql), as SQLite's does: it
--    can never run, and it stops nothing. (The same bound, one lower, is not put on waiting
--    rows: the rescuer and the completer write running rows back as waiting ones.)
-- 2. A running row whose unique scope is still `started` (only the claim turns it to `spent`,
--    and a raw write skips the claim): a new job with the same key is admitted (running rows
--    are outside jobs_unique_idx's `started` scope), and the rescue that brings the running
--    row back to retryable breaks the unique index. The rescue is one statement for every
--    kind, so no expired lease of any kind was rescued any more; a release batch holding the
--    row failed the same way. Such rows are repaired (`spent`, as the claim would have made
--    them: read through jobs_rescue_idx, which holds the running rows), and refused from now on.
-- 3. A head of an ordering key whose key was changed, or which was moved back to `pending`, by
--    a raw UPDATE: no trigger released the key, so its pending jobs waited until another job
--    of the key was enqueued. The release now fires whenever a head leaves the head states or
--    its key (jobs_ordering_release_left replaces jobs_ordering_release_finished; finishing is
--    leaving the head states).

CREATE OR REPLACE FUNCTION job.claim(in_queue text, in_kinds text[], in_versions integer[], in_leases bigint[], in_max integer, in_worker text, in_caps integer[], in_ahead_of text[])
 RETURNS TABLE(id bigint, lock_token uuid, kind text, queue text, priority smallint, payload text, payload_version integer, attempt integer, max_attempts integer, snoozes integer, trace_context text, waited_ms bigint)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH bound AS MATERIALIZED (
        SELECT coalesce(h.priority, 32767::smallint) AS priority,
               coalesce(h.run_at, 'infinity'::timestamptz) AS run_at,
               coalesce(h.id, 9223372036854775807) AS id
        FROM (SELECT 1) AS one
        LEFT JOIN LATERAL (
            SELECT f.priority, f.run_at, f.id
            FROM unnest($8::text[]) AS r(kind)
            CROSS JOIN LATERAL (
                SELECT j.priority, j.run_at, j.id
                FROM job.jobs j
                WHERE j.queue = $1::text
                  AND j.kind = r.kind
                  AND j.state = 'available'
                ORDER BY j.priority, j.run_at, j.id
                LIMIT 1
            ) f
            ORDER BY 1, 2, 3
            LIMIT 1
        ) h ON true
    ),
    k AS (
        SELECT k.kind, k.version, k.cap
        FROM unnest($2::text[], $3::integer[], $7::integer[]) AS k(kind, version, cap)
        WHERE NOT EXISTS (SELECT 1 FROM job.pauses p
                          WHERE p.scope = 'kind' AND p.name = k.kind
                            AND (p.resume_at IS NULL OR p.resume_at > now()))
          AND NOT EXISTS (SELECT 1 FROM job.pauses p
                          WHERE p.scope = 'queue' AND p.name = $1::text
                            AND (p.resume_at IS NULL OR p.resume_at > now()))
    ),
    -- Running rows of a limited kind are counted through jobs_rescue_idx (locked_until IS NOT
    -- NULL is running, by jobs_lease_check): no extra index on the hot path.
    room AS MATERIALIZED (
        SELECT k.kind, k.version,
               CASE WHEN k.cap IS NULL THEN $5::integer
                    ELSE least($5::integer,
                               k.cap - (SELECT count(*) FROM job.jobs r
                                        WHERE r.locked_until IS NOT NULL AND r.kind = k.kind)::integer)
               END AS room,
               bound.priority AS before_priority, bound.run_at AS before_run_at,
               bound.id AS before_id
        FROM k
        CROSS JOIN bound
    ),
    picked AS (
        SELECT c.tid, c.id, c.priority, c.run_at
        FROM room
        CROSS JOIN LATERAL (
            SELECT j.ctid AS tid, j.id, j.priority, j.run_at
            FROM job.jobs j
            WHERE j.queue = $1::text
              AND j.kind = room.kind
              AND j.state = 'available'
              AND (j.priority, j.run_at, j.id)
                  < (room.before_priority, room.before_run_at, room.before_id)
              AND j.run_at <= now()
              AND j.payload_version <= room.version
              AND (j.deadline IS NULL OR j.deadline > now())
              AND NOT j.cancel_requested
              AND j.attempt < 2147483646
            ORDER BY j.priority, j.run_at, j.id
            LIMIT room.room
            FOR NO KEY UPDATE SKIP LOCKED
        ) c
        WHERE room.room > 0
        ORDER BY c.priority, c.run_at, c.id
        LIMIT $5::integer
    ),
    claimed AS (
        UPDATE job.jobs j
        SET state        = 'running',
            attempt      = j.attempt + 1,
            lock_token   = gen_random_uuid(),
            locked_by    = $6::text,
            locked_until = now()
                + ($4::bigint[])[array_position($2::text[], j.kind)] * interval '1 millisecond',
            unique_scope = CASE WHEN j.unique_scope = 'started' THEN 'spent' ELSE j.unique_scope END
        FROM picked
        WHERE j.ctid = picked.tid
        RETURNING j.id, j.lock_token, j.kind, j.queue, j.priority, j.payload, j.payload_version,
                  j.attempt, j.max_attempts, j.snoozes, j.run_at, j.trace_context
    )
    SELECT id, lock_token, kind, queue, priority, payload::text AS payload, payload_version,
           attempt, max_attempts, snoozes, trace_context,
           greatest(0, extract(epoch FROM now() - run_at) * 1000)::bigint AS waited_ms
    FROM claimed
    ORDER BY priority, run_at, id;
END
$function$;

UPDATE job.jobs SET unique_scope = 'spent'
WHERE locked_until IS NOT NULL AND state = 'running' AND unique_scope = 'started';

-- NOT VALID: the rows it could refuse were just repaired, and the table is not scanned under
-- the lock. Every insert and update is checked.
ALTER TABLE job.jobs ADD CONSTRAINT jobs_running_scope_check
    CHECK (state <> 'running' OR unique_scope IS DISTINCT FROM 'started') NOT VALID;

DROP TRIGGER jobs_ordering_release_finished ON job.jobs;

CREATE TRIGGER jobs_ordering_release_left
    AFTER UPDATE OF state, ordering_key ON job.jobs
    FOR EACH ROW WHEN (OLD.ordering_key IS NOT NULL
                       AND OLD.state IN ('scheduled', 'available', 'running', 'retryable')
                       AND (NEW.state NOT IN ('scheduled', 'available', 'running', 'retryable')
                            OR NEW.ordering_key IS DISTINCT FROM OLD.ordering_key))
    EXECUTE FUNCTION job.ordering_release();
$job_migration_0027$;
        INSERT INTO job.schema_migrations (version, name) VALUES (27, 'stopping_rows');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 27 AND name = 'stopping_rows') THEN
        RAISE EXCEPTION 'job migration 27 is recorded in job.schema_migrations as `%`, but this script''s migration 27 is `stopping_rows`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 27);
    END IF;
END
$apply$;
COMMIT;

-- 0028 legacy_rows
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 28) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 28 `legacy_rows` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 28;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 28 `legacy_rows` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 28 applied now could undo what later migrations changed. Apply what migration 28 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0028$
-- 0028 legacy rows: the rows stored before migration 0022 that its checks (added NOT VALID, so
-- that old rows were not scanned) refuse are repaired, keeping their meaning. NOT VALID skips
-- only the check of the rows already there: every UPDATE of such a row is checked, and the
-- claim and the heartbeat update the rows they take. So one such row stopped every claim of its
-- queue (it was picked, and the claim failed) or every heartbeat batch it was in. The case a
-- door let in: `job.enqueue(..., tags => '[5:5]={a}')`, an array not indexed from 1, accepted
-- until 0022; the others needed raw writes. Append-only: change the schema in a new file.
--
-- One pass over the table, changing only the rows that break a rule:
-- - tags indexed from 1, the same tags in the same order;
-- - `attempt` and `snoozes` at most 2,147,483,646, and a running row's `attempt` at least 1;
-- - a `locked_by` over 128 bytes cleared (it only names the holder; the token holds the lease);
-- - `progress_at` and `stuck_since` outside 0001-9999 cleared (both are optional).
-- The admission trigger is off for the pass: it checks the tags' names, which this pass does not
-- change, and a name refused since must not stop the repair of the index.

ALTER TABLE job.jobs DISABLE TRIGGER jobs_admission;

UPDATE job.jobs SET
    tags        = CASE WHEN cardinality(tags) > 0 AND array_lower(tags, 1) <> 1
                       THEN ARRAY(SELECT unnest(tags)) ELSE tags END,
    attempt     = CASE WHEN attempt > 2147483646 THEN 2147483646
                       WHEN state = 'running' AND attempt < 1 THEN 1
                       ELSE attempt END,
    snoozes     = least(snoozes, 2147483646),
    locked_by   = CASE WHEN octet_length(locked_by) > 128 THEN NULL ELSE locked_by END,
    progress_at = CASE WHEN progress_at < '0001-01-01 00:00:00+00'
                         OR progress_at >= '10000-01-01 00:00:00+00'
                       THEN NULL ELSE progress_at END,
    stuck_since = CASE WHEN stuck_since < '0001-01-01 00:00:00+00'
                         OR stuck_since >= '10000-01-01 00:00:00+00'
                       THEN NULL ELSE stuck_since END
WHERE (cardinality(tags) > 0 AND array_lower(tags, 1) <> 1)
   OR attempt > 2147483646
   OR (state = 'running' AND attempt < 1)
   OR snoozes > 2147483646
   OR octet_length(locked_by) > 128
   OR progress_at < '0001-01-01 00:00:00+00' OR progress_at >= '10000-01-01 00:00:00+00'
   OR stuck_since < '0001-01-01 00:00:00+00' OR stuck_since >= '10000-01-01 00:00:00+00';

ALTER TABLE job.jobs ENABLE TRIGGER jobs_admission;
$job_migration_0028$;
        INSERT INTO job.schema_migrations (version, name) VALUES (28, 'legacy_rows');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 28 AND name = 'legacy_rows') THEN
        RAISE EXCEPTION 'job migration 28 is recorded in job.schema_migrations as `%`, but this script''s migration 28 is `legacy_rows`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 28);
    END IF;
END
$apply$;
COMMIT;

-- 0029 operator_races
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 29) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 29 `operator_races` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 29;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 29 `operator_races` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 29 applied now could undo what later migrations changed. Apply what migration 29 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0029$
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
$job_migration_0029$;
        INSERT INTO job.schema_migrations (version, name) VALUES (29, 'operator_races');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 29 AND name = 'operator_races') THEN
        RAISE EXCEPTION 'job migration 29 is recorded in job.schema_migrations as `%`, but this script''s migration 29 is `operator_races`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 29);
    END IF;
END
$apply$;
COMMIT;

-- 0030 rate_window_limit
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 30) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 30 `rate_window_limit` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 30;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 30 `rate_window_limit` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 30 applied now could undo what later migrations changed. Apply what migration 30 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0030$
-- 0030 a rate key at its limit costs its claim nothing. Append-only: change the schema in a new
-- numbered file.
--
-- A claim of a rate-limited kind (claim_rated.sql) counted, for every key it looked at, the
-- key's starts in the window by reading its whole `starts` array, also when the key was at its
-- limit and gave nothing: 256 keys with 10,000 starts each made every claim of the kind read
-- 2.56 million timestamps (about 0.3 s, under the kind's advisory lock, so every claim of the
-- kind in the cluster waited for it), to claim nothing.
--
-- The claim that writes a key's window now also writes the N-th newest start it keeps
-- (`limit_start`) and that N (`limit_starts`, the kind's limit then). A key holds N starts in a
-- window ending now exactly when its N-th newest start is inside the window, and no start is
-- added but by such a write (claims of the kind run one at a time under its lock), so a later
-- claim with the same limit knows the key is at its limit from these two columns, without
-- reading the array. Otherwise (the start has left the window, the key has fewer than N starts,
-- or the limit changed in a deploy) it counts as before. Rows written before this migration
-- have nulls and are counted until their next write.
ALTER TABLE job.rate_windows
    ADD COLUMN limit_starts integer,
    ADD COLUMN limit_start timestamptz;

-- NOT VALID: every existing row has nulls, which pass; new writes are checked.
ALTER TABLE job.rate_windows ADD CONSTRAINT rate_windows_limit_check
    CHECK ((limit_starts IS NULL) = (limit_start IS NULL)
           AND (limit_starts IS NULL OR limit_starts >= 1)) NOT VALID;
$job_migration_0030$;
        INSERT INTO job.schema_migrations (version, name) VALUES (30, 'rate_window_limit');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 30 AND name = 'rate_window_limit') THEN
        RAISE EXCEPTION 'job migration 30 is recorded in job.schema_migrations as `%`, but this script''s migration 30 is `rate_window_limit`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 30);
    END IF;
END
$apply$;
COMMIT;

-- 0031 dependency_outcomes
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 31) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 31 `dependency_outcomes` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 31;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 31 `dependency_outcomes` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 31 applied now could undo what later migrations changed. Apply what migration 31 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0031$
-- 0031 dependency outcomes: an edge keeps whether its job satisfied it, and every edge is found
-- from the job it points at. Append-only: change the schema in a new numbered file.
--
-- 1. An edge recorded `resolved` only. Redrive (redrive.sql) opens again the resolved edges of
--    a dead letter that their jobs do not satisfy now, and took a job that no longer exists for
--    one that completed and was pruned since: a dependent discarded because the job it
--    depended on was cancelled or discarded, redriven once that job had been pruned
--    (cancelled) or purged (a dead letter), went straight to `available` and ran, although
--    what it needed never completed. job.dependencies_resolve now writes `satisfied` when it
--    resolves an edge: true for an `after_all` edge (any end satisfies it) and for a job that
--    completed, false for a `depends_on` edge whose job was cancelled, discarded or deleted.
--    Redrive opens an edge with `satisfied = false` again whether or not its job still exists
--    (the stager then discards the dependent again, naming the job as deleted), and keeps an
--    edge with `satisfied = true` resolved when its job is gone. Null is unknown: the edges
--    resolved before this migration, and those the stager closes unended when it discards
--    their dependent for another edge; redrive judges them by their job, as before.
--
-- 2. The pruner kept only a job that an unresolved edge points at. The stager resolves a
--    batch's member's edge as soon as the member ends, so the early members of a long batch
--    were pruned (after the completed retention, 24 h by default) before the callback ran, and
--    the callback, which the README promises can read its members' state, errors and result,
--    found them missing. The pruner now also keeps a job that any edge points at whose
--    dependent has not finished (prune_pick.sql, prune.sql). That reads every edge of a job,
--    resolved or not, and so does redrive, which opens again the edges pointing at the jobs it
--    redrives: the partial indexes (dependencies_open_idx, dependencies_fresh_idx) hold only
--    open edges, so dependencies_depends_on_idx holds them all, one more index entry written
--    per edge at enqueue. A pruner pass reads again the jobs it keeps this way that finished
--    before those it deletes, each time: 2-4.5 ms a pass per 1,000 of them (measured with
--    100,000 completed jobs whose dependents were still waiting), where it read none.
--
-- 3. The stager discards a dependent whose `completed`-mode dependency ended otherwise, and
--    took a missing job for such an end whatever its edge recorded: a dependent of B and C,
--    discarded because C was, redriven with C once the cause was fixed, was discarded again
--    as "B was deleted" after C completed, B having completed (or completed after the discard)
--    and been pruned meanwhile. A missing job is a failure now only when its edge recorded
--    one (`satisfied` false: resolved because the job was missing, or did not complete); an
--    edge that recorded it satisfied, and one closed without a verdict (null), read as
--    redrive reads them: not waited for again.
--
-- ADD COLUMN without a default does not rewrite the table; the CREATE INDEX reads it once (in
-- this migration's transaction, where CREATE INDEX CONCURRENTLY cannot run; on a large table,
-- apply it when writes of job.dependencies can wait that long).

ALTER TABLE job.dependencies ADD COLUMN satisfied boolean;

CREATE INDEX dependencies_depends_on_idx ON job.dependencies (depends_on);

-- As in migration 0023, each resolved edge now recording `satisfied`. (CREATE OR REPLACE sets
-- the function's settings anew: jit stays off, as migration 0024 set.)
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
$job_migration_0031$;
        INSERT INTO job.schema_migrations (version, name) VALUES (31, 'dependency_outcomes');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 31 AND name = 'dependency_outcomes') THEN
        RAISE EXCEPTION 'job migration 31 is recorded in job.schema_migrations as `%`, but this script''s migration 31 is `dependency_outcomes`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 31);
    END IF;
END
$apply$;
COMMIT;

-- 0032 worker_grants
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 32) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 32 `worker_grants` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 32;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 32 `worker_grants` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 32 applied now could undo what later migrations changed. Apply what migration 32 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0032$
-- 0032 worker_grants: an upgraded installation grants its workers what a fresh one does.
-- Append-only: change the schema in a new numbered file.
--
-- Migrations 0009 (job.kind_owners, job.leaders, job.set_trace_context), 0012
-- (job.set_ordering_key, job.ordering_wake_up), 0013 (job.dependencies,
-- job.dependencies_exist, job.dependencies_resolve), 0014 (job.compensations) and 0015
-- (job.rate_windows, job.rate_cursors, job.set_rate_key, job.breaker_record) created objects
-- the worker's statements need, and granted them to nobody: only the README told a fresh
-- installation to. A worker role granted as the README said before one of them was refused
-- after the upgrade (stage.sql calls job.ordering_wake_up: scheduled and retrying jobs never
-- became available; the claim of a rate-limited kind writes job.rate_windows; every batch of
-- outcomes calls job.breaker_record).
--
-- So every role that holds the worker's privileges gets the README's worker grants as they
-- are at this migration. The roles are read as 0020 reads a function's grants (aclexplode of
-- the ACL): those granted UPDATE on job.jobs, other than the table's owner, PUBLIC (a grant
-- to PUBLIC of the SECURITY DEFINER functions below would be everyone's, which nobody asked
-- for) and superusers (who need no grant). Granting what a role holds already changes
-- nothing. A role that is a worker by membership in such a role inherits the grants.
--
-- And the README told an operator to take INSERT and DELETE on job.pauses, but a pause is an
-- INSERT ... ON CONFLICT DO UPDATE (sql/pause.sql), which needs UPDATE too: every role
-- holding INSERT and DELETE on job.pauses (same exclusions) gets UPDATE on it.
--
-- A later migration that adds an object a worker or an operator needs grants it the same way
-- (README, "Roles and privileges").

DO $grants$
DECLARE
    worker text;
    operator text;
BEGIN
    FOR worker IN
        SELECT DISTINCT a.grantee::pg_catalog.regrole::text
        FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a, pg_catalog.pg_roles r
        WHERE c.oid = 'job.jobs'::pg_catalog.regclass
          AND a.privilege_type = 'UPDATE'
          AND a.grantee <> c.relowner
          AND r.oid = a.grantee
          AND NOT r.rolsuper
    LOOP
        EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA job TO %s', worker);
        EXECUTE pg_catalog.format(
            'GRANT SELECT, INSERT, UPDATE, DELETE ON job.jobs, job.steps, job.dependencies TO %s',
            worker);
        EXECUTE pg_catalog.format('GRANT SELECT ON job.pauses TO %s', worker);
        EXECUTE pg_catalog.format(
            'GRANT SELECT, INSERT, UPDATE, DELETE ON job.kind_owners, job.leaders, '
            'job.compensations, job.rate_windows, job.rate_cursors TO %s',
            worker);
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION job.enqueue_unique, job.set_trace_context, '
            'job.set_ordering_key, job.set_rate_key, job.ordering_wake_up, '
            'job.dependencies_exist, job.dependencies_resolve, job.breaker_record TO %s',
            worker);
    END LOOP;

    FOR operator IN
        SELECT a.grantee::pg_catalog.regrole::text
        FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a, pg_catalog.pg_roles r
        WHERE c.oid = 'job.pauses'::pg_catalog.regclass
          AND a.grantee <> c.relowner
          AND r.oid = a.grantee
          AND NOT r.rolsuper
        GROUP BY a.grantee
        HAVING pg_catalog.bool_or(a.privilege_type = 'INSERT')
           AND pg_catalog.bool_or(a.privilege_type = 'DELETE')
    LOOP
        EXECUTE pg_catalog.format('GRANT UPDATE ON job.pauses TO %s', operator);
    END LOOP;
END
$grants$;
$job_migration_0032$;
        INSERT INTO job.schema_migrations (version, name) VALUES (32, 'worker_grants');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 32 AND name = 'worker_grants') THEN
        RAISE EXCEPTION 'job migration 32 is recorded in job.schema_migrations as `%`, but this script''s migration 32 is `worker_grants`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 32);
    END IF;
END
$apply$;
COMMIT;

-- 0033 deadline_door
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 33) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 33 `deadline_door` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 33;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 33 `deadline_door` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 33 applied now could undo what later migrations changed. Apply what migration 33 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0033$
-- 0033 deadline_door: a job whose deadline is not after both its run time and now is refused
-- at every door that inserts a job. Append-only: change the schema in a new numbered file.
--
-- The claim takes a job only from its run time and before its deadline, so such a job could
-- never start: it waited to be ended by the expirer (a dead letter of class `expired`, firing
-- its compensation), and the enqueue had answered with its id. The Rust door refused it only
-- when it could compare the two itself (two instants, or two delays); `job.enqueue`,
-- `job.enqueue_many`, a raw INSERT and the Rust door's mixed forms (`run_at` an instant and
-- `deadline_in` a delay, or the other way round, the CLI's `--run-at` with `--deadline-in`)
-- stored it. Refused here with ``job row refused: `deadline` ...`` (SQLSTATE 23514, COLUMN
-- `deadline`: `EnqueueError::InvalidOption` `deadline` through the store). Only an INSERT:
-- rows stored before, and a retry whose backoff runs past the deadline, are the expirer's, as
-- they were. An upsert that replaces a waiting duplicate (`replace_duplicate`) is checked on
-- its proposed row, before the conflict is found.
CREATE FUNCTION job.refuse_deadline() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'job row refused: `deadline` % is not after the run time % and now %: the '
                    'job could never start, only expire',
            NEW.deadline, NEW.run_at, now()
        USING ERRCODE = 'check_violation', COLUMN = 'deadline', TABLE = 'jobs', SCHEMA = 'job',
              CONSTRAINT = TG_NAME;
END
$$;

CREATE TRIGGER jobs_deadline_door
    BEFORE INSERT ON job.jobs
    FOR EACH ROW
    WHEN (NEW.deadline IS NOT NULL AND NEW.deadline <= greatest(NEW.run_at, now()))
    EXECUTE FUNCTION job.refuse_deadline();
$job_migration_0033$;
        INSERT INTO job.schema_migrations (version, name) VALUES (33, 'deadline_door');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 33 AND name = 'deadline_door') THEN
        RAISE EXCEPTION 'job migration 33 is recorded in job.schema_migrations as `%`, but this script''s migration 33 is `deadline_door`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 33);
    END IF;
END
$apply$;
COMMIT;

-- 0034 ordering_snapshots
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 34) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 34 `ordering_snapshots` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 34;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 34 `ordering_snapshots` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 34 applied now could undo what later migrations changed. Apply what migration 34 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0034$
-- 0034 ordering_snapshots: a key's pending job is never stranded by a transaction that reads
-- an old snapshot. Append-only: change the schema in a new numbered file.
--
-- Both triggers of per-key ordering (migration 0012) decided from what their statement's
-- snapshot shows. Under READ COMMITTED a statement's snapshot is taken after the key's lock,
-- and shows whatever the lock's last holder committed. Under REPEATABLE READ or SERIALIZABLE it
-- is the transaction's first, possibly older than the lock, and two cases left a pending job
-- with no head and no wake-up entry, waiting until another job of its key was enqueued:
--
-- 1. A head finished in such a transaction (`complete_in` in the application's REPEATABLE READ
--    transaction, say) while a job of its key was enqueued after the snapshot: the release
--    trigger's promotion did not see that job, and promoted nothing; the key's wake-up entry,
--    written by that enqueue, had been deleted by a stager pass that ran while the head still
--    ran. The release now also puts the key on the wake-up list whenever such a transaction's
--    promotion promoted nothing, for the stager to look again after its commit.
-- 2. A job enqueued in such a transaction found the key's head in its snapshot (finished since)
--    and became pending, and skipped writing the key's wake-up entry because the snapshot
--    still showed one (deleted since by a stager pass). The admit trigger now writes the entry
--    whatever such a snapshot shows (a duplicate is forgotten by the stager with the rest).
--
-- Under READ COMMITTED nothing changes.

CREATE OR REPLACE FUNCTION job.ordering_admit() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(job.ordering_lock_key(NEW.ordering_key));
    IF TG_OP = 'INSERT' THEN
        -- The id was drawn before this lock was taken, so a transaction that waited for it
        -- could hold a lower id than the one it waited for. Draw it again: the ids of a key
        -- then follow the order in which their enqueuers took the key's lock, and "enqueue
        -- order" is id order. Rows inserted one after the other in one statement still get
        -- ascending ids (enqueue_many maps ids to inputs by that).
        NEW.id := nextval(pg_get_serial_sequence('job.jobs', 'id'));
    END IF;
    IF EXISTS (SELECT 1 FROM job.jobs o
               WHERE o.ordering_key = NEW.ordering_key AND o.id <> NEW.id
                 AND o.state IN ('pending', 'scheduled', 'available', 'running', 'retryable'))
    THEN
        NEW.state := 'pending';
        -- Under READ COMMITTED an entry this statement sees stays until after this commit
        -- (the stager deletes entries under the key's lock, which this transaction holds); an
        -- older snapshot may show one deleted since.
        PERFORM job.ordering_wake_later(
            NEW.ordering_key, current_setting('transaction_isolation') <> 'read committed');
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION job.ordering_release() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_try_advisory_xact_lock(job.ordering_lock_key(OLD.ordering_key)) THEN
        -- A snapshot older than the lock may miss a job of the key enqueued since: the stager
        -- looks again after this commit.
        IF NOT job.ordering_promote(OLD.ordering_key)
           AND current_setting('transaction_isolation') <> 'read committed' THEN
            PERFORM job.ordering_wake_later(OLD.ordering_key, true);
        END IF;
    ELSE
        PERFORM job.ordering_wake_later(OLD.ordering_key, true);
    END IF;
    RETURN NULL;
END
$$;
$job_migration_0034$;
        INSERT INTO job.schema_migrations (version, name) VALUES (34, 'ordering_snapshots');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 34 AND name = 'ordering_snapshots') THEN
        RAISE EXCEPTION 'job migration 34 is recorded in job.schema_migrations as `%`, but this script''s migration 34 is `ordering_snapshots`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 34);
    END IF;
END
$apply$;
COMMIT;

-- 0035 pending_deadlines
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 35) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 35 `pending_deadlines` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 35;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 35 `pending_deadlines` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 35 applied now could undo what later migrations changed. Apply what migration 35 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0035$
-- 0035 pending_deadlines: a pending job's deadline is kept while it waits. Append-only: change
-- the schema in a new numbered file.
--
-- The expirer (expire.sql) read waiting jobs in `available`, `scheduled` and `retryable`
-- only, through jobs_deadline_idx. A `pending` job (waiting for the jobs it depends on, or
-- behind its ordering key's head) was expired only once it left `pending`: a dependent whose
-- dependency never ended (scheduled months ahead, say, or itself waiting) stayed pending past
-- its deadline for as long as that lasted, its compensation unfired and its own dependents
-- waiting. Its deadline is what it must start by, wherever it waits; the expirer now reads
-- pending jobs past their deadline too, through an index of their own (pending jobs with a
-- deadline are few, so it costs the other jobs' writes nothing), and discards them as it
-- discards the others (class `expired`), which fails its dependents and fires its
-- compensation as any discard does. A pending job is never a head, so no key is released.
--
-- Built in this migration's transaction (CREATE INDEX CONCURRENTLY cannot run in one): it
-- reads the table once, and holds off writes to job.jobs meanwhile; on a large table, apply it
-- when a short pause of enqueues is acceptable.
CREATE INDEX jobs_pending_deadline_idx ON job.jobs (deadline)
    WHERE deadline IS NOT NULL AND state = 'pending';
$job_migration_0035$;
        INSERT INTO job.schema_migrations (version, name) VALUES (35, 'pending_deadlines');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 35 AND name = 'pending_deadlines') THEN
        RAISE EXCEPTION 'job migration 35 is recorded in job.schema_migrations as `%`, but this script''s migration 35 is `pending_deadlines`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 35);
    END IF;
END
$apply$;
COMMIT;

-- 0036 compensation_passing_errors
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 36) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 36 `compensation_passing_errors` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 36;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 36 `compensation_passing_errors` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 36 applied now could undo what later migrations changed. Apply what migration 36 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0036$
-- 0036 compensation_passing_errors: a compensating job that the server could not insert for a
-- passing reason is not given up. Append-only: change the schema in a new numbered file.
--
-- job.compensate (the AFTER trigger that enqueues a discarded job's compensating job) caught
-- every error of its INSERT and turned it into a WARNING, so that a compensating job the
-- rules refuse (a payload over the limit after all, an application's trigger) never fails the
-- discard. It caught the server's passing conditions too: a deadlock, a lock not available, a
-- shortage (out of memory, disk full), an operator's intervention, a connection's end. The
-- discard then committed without its compensation, a WARNING in the server log the only
-- trace. Those now fail the discard's statement, as they would any statement: the worker
-- writes the outcome again (it passes), and the compensation is enqueued with it. Only what
-- says something about the row itself is still caught. The classes are those the store
-- retries (job-postgres/src/error.rs, PASSING_CLASSES) that speak of the server rather than
-- of the deploy: 08, 40, 53, 55, 57, 58, XX. (57014, a cancelled statement, was never caught:
-- PL/pgSQL's OTHERS leaves it out.)
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
        IF left(SQLSTATE, 2) IN ('08', '40', '53', '55', '57', '58', 'XX') THEN
            RAISE;
        END IF;
        RAISE WARNING 'job %: compensating job % not enqueued: %', NEW.id, c.compensate_kind,
            SQLERRM;
    END;
    RETURN NULL;
END
$$;
$job_migration_0036$;
        INSERT INTO job.schema_migrations (version, name) VALUES (36, 'compensation_passing_errors');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 36 AND name = 'compensation_passing_errors') THEN
        RAISE EXCEPTION 'job migration 36 is recorded in job.schema_migrations as `%`, but this script''s migration 36 is `compensation_passing_errors`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 36);
    END IF;
END
$apply$;
COMMIT;

-- 0037 dependency_owner
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 37) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 37 `dependency_owner` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 37;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 37 `dependency_owner` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 37 applied now could undo what later migrations changed. Apply what migration 37 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0037$
-- 0037 dependency_owner: a dependent's edges go with it. Append-only: change the schema in a
-- new numbered file.
--
-- job.dependencies.job_id had no foreign key: every path of the framework that deletes a job
-- (prune, purge, the stager's clean-up) deletes its edges too, but a raw DELETE of a waiting
-- dependent (an application with the worker role's table privileges) left them. Such edges
-- stayed unflagged and unresolved for good, and being first in the stager's flagging order
-- (by the job waited for), a few thousand of them took every place of its batch: no new edge
-- was flagged again, and the dependents enqueued after were seen only by the stager's sweep,
-- at most once a minute. An edge now goes with its dependent (ON DELETE CASCADE, as job.steps
-- does since migration 0003); the edges such deletes left before are deleted here.
--
-- The edges left before are deleted first, in this transaction: a read of every edge (an
-- anti-join with job.jobs), under row locks only, so claims and heartbeats go on. Then both
-- tables are locked (SHARE ROW EXCLUSIVE, which waits for their writers and holds further
-- writes until this transaction commits) in the order every writer takes them, job.jobs
-- first: an enqueue with dependencies and the stager write a job, then its edges, and the
-- ALTER alone locked the edges first, then waited for job.jobs, a deadlock with either (a
-- redrive, whose statement locks the edges first, takes job.jobs before it: the store's
-- redrive_lock.sql). The
-- constraint is NOT VALID: added under those locks without a scan, it is enforced on every
-- edge written from now on, and its cascade applies to every edge, old or new (an orphan
-- written between the DELETE and the lock stays, harmless). The edges pointing at a job
-- (depends_on) keep no key: they outlive a job waited for that is pruned or purged, which
-- redrive and the stager read (migration 0031).

DELETE FROM job.dependencies d
WHERE NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.id = d.job_id);

LOCK TABLE job.jobs, job.dependencies IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE job.dependencies
    ADD CONSTRAINT dependencies_job_id_fkey FOREIGN KEY (job_id)
    REFERENCES job.jobs (id) ON DELETE CASCADE NOT VALID;
$job_migration_0037$;
        INSERT INTO job.schema_migrations (version, name) VALUES (37, 'dependency_owner');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 37 AND name = 'dependency_owner') THEN
        RAISE EXCEPTION 'job migration 37 is recorded in job.schema_migrations as `%`, but this script''s migration 37 is `dependency_owner`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 37);
    END IF;
END
$apply$;
COMMIT;

-- 0038 worker_reads_migrations
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 38) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 38 `worker_reads_migrations` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 38;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 38 `worker_reads_migrations` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 38 applied now could undo what later migrations changed. Apply what migration 38 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0038$
-- 0038 worker_reads_migrations: a worker's `migrate()` runs on an up-to-date schema. Append-only:
-- change the schema in a new numbered file.
--
-- The README has every process call `PgStore::migrate()` at startup, and a second run only
-- reads `job.schema_migrations` (under the migrator's advisory lock, which any role takes),
-- but no grant let a worker read it: a worker granted as the README said failed to start,
-- "permission denied for table schema_migrations", with nothing to migrate. The worker's
-- grants now include reading it (a worker still cannot apply a migration: that is the
-- owner's). Granted here, as migration 0032 grants the worker's block, to every role that holds
-- the worker's privileges (UPDATE on job.jobs; not the owner, PUBLIC or superusers).

DO $grants$
DECLARE
    worker text;
BEGIN
    FOR worker IN
        SELECT DISTINCT a.grantee::pg_catalog.regrole::text
        FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a, pg_catalog.pg_roles r
        WHERE c.oid = 'job.jobs'::pg_catalog.regclass
          AND a.privilege_type = 'UPDATE'
          AND a.grantee <> c.relowner
          AND r.oid = a.grantee
          AND NOT r.rolsuper
    LOOP
        EXECUTE pg_catalog.format('GRANT SELECT ON job.schema_migrations TO %s', worker);
    END LOOP;
END
$grants$;
$job_migration_0038$;
        INSERT INTO job.schema_migrations (version, name) VALUES (38, 'worker_reads_migrations');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 38 AND name = 'worker_reads_migrations') THEN
        RAISE EXCEPTION 'job migration 38 is recorded in job.schema_migrations as `%`, but this script''s migration 38 is `worker_reads_migrations`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 38);
    END IF;
END
$apply$;
COMMIT;

-- 0039 compensating_options
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 39) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 39 `compensating_options` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 39;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 39 `compensating_options` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 39 applied now could undo what later migrations changed. Apply what migration 39 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0039$
-- 0039 compensating_options: a compensating job is enqueued with its own kind's options.
-- Append-only: change the schema in a new numbered file.
--
-- job.compensate inserted only the compensating job's kind, queue, payload, tenant and trace,
-- so the table's defaults applied: 25 attempts, priority 0, payload version 1, whatever the
-- compensating kind said. A compensating kind at `VERSION = 2` had every compensation
-- discarded as poison ("payload version 1 ... has no upgrade to version 2"). Workers now
-- record, beside the kind and queue, the compensating kind's priority, max_attempts and
-- payload version (`Compensate::of`), and the trigger enqueues with them. The columns are
-- nullable: a row recorded by an older worker (whose statement names only the first three
-- columns, and still succeeds) keeps the old defaults until a newer worker records it again.
--
-- And the wrapping has a third form, as SQLite's trigger has had since its migration 5: when
-- the discarded payload's omission is not enough (a last error of 5,000 bytes under a limit of
-- 4,096), the last error is omitted too (`"error": null, "error_omitted": true`). The insert
-- was refused, and the compensation given up with a WARNING. Only a limit too small for the
-- id, kind and flags alone still refuses it (a WARNING, as before).
ALTER TABLE job.compensations
    ADD COLUMN compensate_priority smallint
        CONSTRAINT compensations_priority_check CHECK (compensate_priority >= 0),
    ADD COLUMN compensate_max_attempts integer
        CONSTRAINT compensations_max_attempts_check CHECK (compensate_max_attempts >= 1),
    ADD COLUMN compensate_version integer
        CONSTRAINT compensations_version_check CHECK (compensate_version >= 1);

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
    -- When even that does not fit, the last error is omitted too.
    wrapped := jsonb_build_object('discarded', jsonb_build_object(
        'job_id', NEW.id,
        'kind', NEW.kind,
        'payload', NEW.payload,
        'payload_omitted', false,
        'error', NEW.errors -> -1,
        'error_omitted', false));
    SELECT octet_length(wrapped::text) <= s.payload_limit INTO fits FROM job.settings s;
    IF NOT coalesce(fits, false) THEN
        wrapped := jsonb_build_object('discarded', jsonb_build_object(
            'job_id', NEW.id,
            'kind', NEW.kind,
            'payload', NULL,
            'payload_omitted', true,
            'error', NEW.errors -> -1,
            'error_omitted', false));
        SELECT octet_length(wrapped::text) <= s.payload_limit INTO fits FROM job.settings s;
    END IF;
    IF NOT coalesce(fits, false) THEN
        wrapped := jsonb_build_object('discarded', jsonb_build_object(
            'job_id', NEW.id,
            'kind', NEW.kind,
            'payload', NULL,
            'payload_omitted', true,
            'error', NULL,
            'error_omitted', (NEW.errors -> -1) IS NOT NULL));
    END IF;
    IF NEW.trace_context ~ '^00-[0123456789abcdef]{32}-[0123456789abcdef]{16}-[0123456789abcdef]{2}$'
       AND substr(NEW.trace_context, 4, 32) <> '00000000000000000000000000000000'
       AND substr(NEW.trace_context, 37, 16) <> '0000000000000000' THEN
        trace := NEW.trace_context;
    END IF;
    BEGIN
        INSERT INTO job.jobs (kind, queue, priority, max_attempts, payload_version, payload,
                              tenant, trace_context)
        VALUES (c.compensate_kind, c.compensate_queue, coalesce(c.compensate_priority, 0),
                coalesce(c.compensate_max_attempts, 25), coalesce(c.compensate_version, 1),
                wrapped, NEW.tenant, trace);
    EXCEPTION WHEN OTHERS THEN
        IF left(SQLSTATE, 2) IN ('08', '40', '53', '55', '57', '58', 'XX') THEN
            RAISE;
        END IF;
        RAISE WARNING 'job %: compensating job % not enqueued: %', NEW.id, c.compensate_kind,
            SQLERRM;
    END;
    RETURN NULL;
END
$$;
$job_migration_0039$;
        INSERT INTO job.schema_migrations (version, name) VALUES (39, 'compensating_options');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 39 AND name = 'compensating_options') THEN
        RAISE EXCEPTION 'job migration 39 is recorded in job.schema_migrations as `%`, but this script''s migration 39 is `compensating_options`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 39);
    END IF;
END
$apply$;
COMMIT;

-- 0040 pending_door
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 40) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 40 `pending_door` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 40;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 40 `pending_door` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 40 applied now could undo what later migrations changed. Apply what migration 40 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0040$
-- 0040 pending_door: a row written `pending` with nothing to wait for is not left there.
-- Append-only: change the schema in a new numbered file.
--
-- `pending` means waiting: behind its ordering key's head, or for the jobs it depends on. The
-- stager reaches a pending row only through those (an edge of job.dependencies, or its key
-- on job.ordering_wake), so a raw write of a pending row with neither (another language's
-- producer inserting `state = 'pending'`, an operator's `UPDATE ... SET state = 'pending'`,
-- a keyed row whose key has no other job: the admit trigger kept the state written and queued
-- no wake-up) was never run, and `job check` said the queue reconciled.
--
-- The trigger jobs_pending_door now looks at every row written `pending` when its transaction
-- commits (a deferred constraint trigger: the doors of this crate write a dependent pending
-- and its edges in one statement, a raw writer may write the edges after the row, in the same
-- transaction). A row still pending then, with no unresolved edge:
-- * without an ordering key becomes `available` (`scheduled` when its run_at is to come), as
--   the stager makes a dependent whose edges are all resolved;
-- * with a key that has no head, puts the key on the wake-up list: the stager promotes the
--   key's oldest pending job without open dependencies, under the key's lock (under
--   REPEATABLE READ or SERIALIZABLE, whose snapshot may show a head finished since, always).
-- A row waiting for something is left alone, at the cost of one look at its edges (and its
-- key's head) at commit. Rows not written pending pay nothing (the WHEN clause).
--
-- A transaction that sets its constraints IMMEDIATE (`SET CONSTRAINTS ALL IMMEDIATE`) has
-- the look at the end of the statement instead: write the edges in the same statement then.
--
-- The rows stranded so before this migration are repaired the same way here (read through
-- jobs_ordering_pending_idx, which holds every pending row).

CREATE FUNCTION job.pending_door() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    -- The row as it is now, at commit, not as the event saw it.
    SELECT j.id, j.ordering_key, j.queue, j.run_at INTO r
    FROM job.jobs j
    WHERE j.id = NEW.id AND j.state = 'pending';
    IF NOT FOUND
       OR EXISTS (SELECT 1 FROM job.dependencies d WHERE d.job_id = r.id AND NOT d.resolved) THEN
        RETURN NULL;
    END IF;
    IF r.ordering_key IS NULL THEN
        UPDATE job.jobs j
        SET state = CASE WHEN j.run_at > now() THEN 'scheduled'
                         ELSE 'available' END::job.job_state
        WHERE j.id = r.id AND j.state = 'pending';
        IF r.run_at <= now() THEN
            PERFORM pg_notify('job_insert', r.queue);
        END IF;
    ELSIF current_setting('transaction_isolation') <> 'read committed'
          OR NOT EXISTS (SELECT 1 FROM job.jobs h
                         WHERE h.ordering_key = r.ordering_key
                           AND h.state IN ('scheduled', 'available', 'running', 'retryable')) THEN
        PERFORM job.ordering_wake_later(r.ordering_key, false);
    END IF;
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION job.pending_door() FROM PUBLIC;

CREATE CONSTRAINT TRIGGER jobs_pending_door
    AFTER INSERT OR UPDATE OF state ON job.jobs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.state = 'pending')
    EXECUTE FUNCTION job.pending_door();

-- The rows stranded before: the same repair, once.
WITH stranded AS (
    SELECT j.id, j.ordering_key
    FROM job.jobs j
    WHERE j.state = 'pending'
      AND NOT EXISTS (SELECT 1 FROM job.dependencies d WHERE d.job_id = j.id AND NOT d.resolved)
),
freed AS (
    UPDATE job.jobs j
    SET state = CASE WHEN j.run_at > now() THEN 'scheduled'
                     ELSE 'available' END::job.job_state
    FROM stranded s
    WHERE j.id = s.id AND s.ordering_key IS NULL
)
INSERT INTO job.ordering_wake (ordering_key)
SELECT DISTINCT s.ordering_key
FROM stranded s
WHERE s.ordering_key IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM job.jobs h
                  WHERE h.ordering_key = s.ordering_key
                    AND h.state IN ('scheduled', 'available', 'running', 'retryable'));
$job_migration_0040$;
        INSERT INTO job.schema_migrations (version, name) VALUES (40, 'pending_door');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 40 AND name = 'pending_door') THEN
        RAISE EXCEPTION 'job migration 40 is recorded in job.schema_migrations as `%`, but this script''s migration 40 is `pending_door`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 40);
    END IF;
END
$apply$;
COMMIT;

-- 0041 rescue_after_restart
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 41) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 41 `rescue_after_restart` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 41;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 41 `rescue_after_restart` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 41 applied now could undo what later migrations changed. Apply what migration 41 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0041$
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

$job_migration_0041$;
        INSERT INTO job.schema_migrations (version, name) VALUES (41, 'rescue_after_restart');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 41 AND name = 'rescue_after_restart') THEN
        RAISE EXCEPTION 'job migration 41 is recorded in job.schema_migrations as `%`, but this script''s migration 41 is `rescue_after_restart`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 41);
    END IF;
END
$apply$;
COMMIT;

-- 0042 door_echoes
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 42) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 42 `door_echoes` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 42;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 42 `door_echoes` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 42 applied now could undo what later migrations changed. Apply what migration 42 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0042$
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

$job_migration_0042$;
        INSERT INTO job.schema_migrations (version, name) VALUES (42, 'door_echoes');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 42 AND name = 'door_echoes') THEN
        RAISE EXCEPTION 'job migration 42 is recorded in job.schema_migrations as `%`, but this script''s migration 42 is `door_echoes`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 42);
    END IF;
END
$apply$;
COMMIT;

-- 0043 crash_restart_hold
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 43) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 43 `crash_restart_hold` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 43;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 43 `crash_restart_hold` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 43 applied now could undo what later migrations changed. Apply what migration 43 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0043$
-- 0043 crash_restart_hold: the restart hold of migration 0041 covers crash restarts too.
-- Append-only: change the schema in a new numbered file.
--
-- When a backend dies (the OOM killer, a segfault, a `kill -9`), the postmaster ends every
-- session, reinitializes shared memory, runs crash recovery and answers again: the same event
-- for leases as a restart, but `pg_postmaster_start_time()` keeps the postmaster's first
-- start, so the hold never applied and the rescuers took the leases that ran out during
-- recovery before their holders could renew them. Crash recovery discards the cumulative
-- statistics and sets their reset time to its end (PostgreSQL 15 and later; earlier versions'
-- statistics collector does the same when it restarts), which every role may read:
-- job.server_started_at() is now the later of the two. A `pg_stat_reset_shared('bgwriter')`
-- by an operator also counts as a start: the leases that ran out in the 15 seconds before it
-- wait up to 15 seconds more, nothing else. A standby promoted to primary keeps both times
-- and is not covered.

CREATE OR REPLACE FUNCTION job.server_started_at() RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT greatest(pg_postmaster_start_time(), pg_stat_get_bgwriter_stat_reset_time()) $$;
$job_migration_0043$;
        INSERT INTO job.schema_migrations (version, name) VALUES (43, 'crash_restart_hold');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 43 AND name = 'crash_restart_hold') THEN
        RAISE EXCEPTION 'job migration 43 is recorded in job.schema_migrations as `%`, but this script''s migration 43 is `crash_restart_hold`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 43);
    END IF;
END
$apply$;
COMMIT;

-- 0044 last_attempt_start
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 44) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 44 `last_attempt_start` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 44;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 44 `last_attempt_start` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 44 applied now could undo what later migrations changed. Apply what migration 44 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0044$
-- 0044 last_attempt_start: a last attempt is counted by the rescuer only once its handler
-- started. Append-only: change the schema in a new numbered file.
--
-- A claim counts an attempt before the job runs: a worker prefetches jobs, holding their
-- leases while they wait for a slot, and one killed meanwhile (SIGKILL, the OOM killer, a lost
-- machine) leaves them to the rescuer, which counted each as an attempt. On a job's last
-- attempt that made a dead letter of a job that never ran (the chaos review: 1 in 6,000 jobs
-- at retry = 3 with a kill every second).
--
-- Now the worker records the start of a last attempt before any of it runs, its payload's
-- decoding included (sql/record_start.sql: started_lease := the lease's token, guarded by it
-- and by the lease's end), and the rescuer discards an expired last attempt only when its
-- start was recorded under that lease: one that never started goes back to `retryable` with
-- its attempt not counted and, as when a worker gives back a job it did not start
-- (release.sql), no entry in its history: it returns as if never claimed. Other attempts are counted as before (they are retried anyway). A worker of
-- an earlier release records no start: a last attempt of its that dies with it is retried
-- once more, not discarded, while such workers run (at every kill, so a job that kills its
-- worker is retried for as long as earlier workers take it).
--
-- A job claimed `UntilStarted` on its first and only attempt holds its unique key again when
-- that attempt is given back this way, as release.sql gives it back: it never started. A
-- concurrent enqueue may take the key between the statement's snapshot and its write (23505):
-- the function then runs the statement again without giving any key back, as release.sql's
-- caller does.
--
-- started_lease: the token of the lease under which the job's handler last started, where
-- that start was recorded; never cleared (a new claim's token differs from it).

ALTER TABLE job.jobs ADD COLUMN started_lease uuid;

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
DECLARE
    give_key_back boolean := true;
BEGIN
  LOOP
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
        -- A last attempt whose start was not recorded (started_lease is another lease's
        -- token, or none) never ran its handler: it is not counted, and the job is retried.
        SET state        = CASE WHEN j.attempt >= j.max_attempts AND NOT j.cancel_requested
                                     AND j.started_lease IS NOT DISTINCT FROM j.lock_token
                                THEN 'discarded' ELSE 'retryable' END::job.job_state,
            finalized_at = CASE WHEN j.attempt >= j.max_attempts AND NOT j.cancel_requested
                                     AND j.started_lease IS NOT DISTINCT FROM j.lock_token
                                THEN now() END,
            attempt      = CASE WHEN j.attempt >= j.max_attempts
                                     AND j.started_lease IS DISTINCT FROM j.lock_token
                                THEN j.attempt - 1 ELSE j.attempt END,
            -- Given back as a release of an unstarted job is: no entry (the job returns as
            -- if never claimed, and job_rescued_total counts it as retried).
            errors       = CASE WHEN j.attempt >= j.max_attempts
                                     AND j.started_lease IS DISTINCT FROM j.lock_token
                                THEN j.errors
                                ELSE job.push_error(j.errors, jsonb_build_object(
                                    'attempt', j.attempt,
                                    'at', now(),
                                    'class', 'lease_expired',
                                    'message', format('lease of worker %s expired at %s',
                                                      coalesce(j.locked_by, '(unknown)'),
                                                      j.locked_until))) END,
            -- An `UntilStarted` key spent by the claim of a first attempt that never started
            -- is held again, unless another job took it meanwhile (release.sql's rule).
            unique_scope = CASE WHEN give_key_back
                                     AND j.attempt >= j.max_attempts
                                     AND j.started_lease IS DISTINCT FROM j.lock_token
                                     AND j.attempt = 1 AND j.snoozes = 0
                                     AND j.errors = '[]'::jsonb
                                     AND j.unique_scope = 'spent' AND j.unique_key IS NOT NULL
                                     AND NOT EXISTS (
                                         SELECT 1 FROM job.jobs a
                                         WHERE a.kind = j.kind AND a.unique_key = j.unique_key
                                           AND a.id <> j.id AND (
                                               a.unique_scope = 'pruned'
                                               OR (a.unique_scope = 'finished'
                                                   AND a.state IN ('pending', 'scheduled',
                                                                   'available', 'running',
                                                                   'retryable'))
                                               OR (a.unique_scope = 'started'
                                                   AND a.state IN ('pending', 'scheduled',
                                                                   'available', 'retryable'))))
                                THEN 'started' ELSE j.unique_scope END,
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
    RETURN;
   EXCEPTION WHEN unique_violation THEN
    -- A concurrent enqueue took a key this statement gave back (see the head): once more,
    -- giving none back.
    IF NOT give_key_back THEN
        RAISE;
    END IF;
    give_key_back := false;
   END;
  END LOOP;
END
$rescue$;

$job_migration_0044$;
        INSERT INTO job.schema_migrations (version, name) VALUES (44, 'last_attempt_start');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 44 AND name = 'last_attempt_start') THEN
        RAISE EXCEPTION 'job migration 44 is recorded in job.schema_migrations as `%`, but this script''s migration 44 is `last_attempt_start`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 44);
    END IF;
END
$apply$;
COMMIT;

-- 0045 interruptions
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 45) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 45 `interruptions` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 45;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 45 `interruptions` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 45 applied now could undo what later migrations changed. Apply what migration 45 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0045$
-- 0045 interruptions: how many interrupted executions of a job were given back uncounted.
-- Append-only: change the schema in a new numbered file.
--
-- An execution the worker stops without an outcome (a shutdown's drain deadline, or a fence
-- when its lease could not be renewed: the database down or restarting) is given back with its
-- attempt not counted (sql/release.sql). That refund had no bound: a job whose work takes its
-- database down (the restart fences it) ran for ever. release.sql now gives back an execution
-- that ran only while this count is below MAX_REFUNDED_INTERRUPTIONS (10), and adds one; past
-- it, the lease runs out and the rescuer counts the attempt. A redrive sets it back to 0, with
-- the attempts. Rows stored before start at 0 (a count read from their histories would be
-- cut by the history's bound of 20 entries).
--
-- The constant default adds the column without rewriting the table; the CHECK is validated
-- apart (a scan of the table, holding only a lock that lets reads and writes go on).

ALTER TABLE job.jobs ADD COLUMN interruptions integer NOT NULL DEFAULT 0;
ALTER TABLE job.jobs ADD CONSTRAINT jobs_interruptions_check
    CHECK (interruptions >= 0) NOT VALID;
ALTER TABLE job.jobs VALIDATE CONSTRAINT jobs_interruptions_check;
$job_migration_0045$;
        INSERT INTO job.schema_migrations (version, name) VALUES (45, 'interruptions');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 45 AND name = 'interruptions') THEN
        RAISE EXCEPTION 'job migration 45 is recorded in job.schema_migrations as `%`, but this script''s migration 45 is `interruptions`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 45);
    END IF;
END
$apply$;
COMMIT;

-- 0046 breaker_counts
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 46) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 46 `breaker_counts` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 46;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 46 `breaker_counts` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 46 applied now could undo what later migrations changed. Apply what migration 46 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0046$
-- 0046 breaker_counts: job.breaker_record refuses counts no worker sends, and its arithmetic
-- cannot overflow. Append-only: change the schema in a new numbered file.
--
-- job.breaker_record (migration 0015) is a door: any role granted the worker's privileges
-- calls it with counts and settings of its own. It stored whatever counts it was given, and
-- compared `failures * 100` with `failure_percent * attempts` in bigint. A window holding
-- more than 92 quadrillion attempts (one crafted call, with a failure percent of 1 so that the
-- call itself did not overflow) made every later call for the kind fail with "bigint out of
-- range", and since one call carries every kind of a worker's batch, no breaker of that worker
-- counted anything until the window ended (up to 30 days). Negative counts went in too, and a
-- window with negative attempts never trips.
--
-- Now each call's counts must be what a worker counts in one batch (0 to 4,294,967,295
-- attempts, a u32, and at most that many failures), with kinds, counts and settings in
-- arrays of one length, each kind once, at most 1,000 kinds, each a name the kind rule takes
-- (job.name_problem: the function writes pauses, which the worker role cannot write itself,
-- and every reporter pass reads every pause): anything else is refused, naming the argument
-- and the kind. The sums are held at 2^62 (repeated calls of the largest counts that never
-- trip would otherwise reach bigint's bound in some 60 hours, and every later call carrying
-- the kind would fail), and the comparisons and the reason's percentage are computed in
-- numeric; the trips count stops at bigint's bound. The table refuses negative counts, more
-- failures than attempts and sums over 2^62 from any writer; rows that already break that
-- start their window again at zero. A worker with more than 1,000 kinds with breakers sends
-- them in several calls of one transaction (job-postgres/src/report.rs).

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
        RAISE EXCEPTION 'invalid breaker_record kind %: %', coalesce(quote_literal(r.kind), 'null'),
                        r.problem
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT k.kind INTO r
    FROM unnest(p_kinds) AS k(kind)
    GROUP BY k.kind HAVING count(*) > 1
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'invalid breaker_record arguments: kind `%` is named more than once '
                        '(one call counts each kind once)', r.kind
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

-- CREATE OR REPLACE keeps the function's owner and grants (REVOKE FROM PUBLIC, and the
-- worker roles' EXECUTE of migration 0032).

-- A row repaired here is checked against every constraint of the table, the NOT VALID ones
-- of migration 0022 included: a time it holds out of their range (a raw write before 0022) is
-- repaired with it (`tripped_at` to null: not known).
UPDATE job.breakers
SET attempts = 0, failures = 0, window_start = now(),
    tripped_at = CASE WHEN tripped_at >= '0001-01-01 00:00:00+00'
                           AND tripped_at < '10000-01-01 00:00:00+00' THEN tripped_at END
WHERE attempts < 0 OR failures < 0 OR failures > attempts OR attempts > 4611686018427387904;

ALTER TABLE job.breakers ADD CONSTRAINT breakers_counts_check
    CHECK (attempts BETWEEN 0 AND 4611686018427387904 AND failures BETWEEN 0 AND attempts);
$job_migration_0046$;
        INSERT INTO job.schema_migrations (version, name) VALUES (46, 'breaker_counts');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 46 AND name = 'breaker_counts') THEN
        RAISE EXCEPTION 'job migration 46 is recorded in job.schema_migrations as `%`, but this script''s migration 46 is `breaker_counts`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 46);
    END IF;
END
$apply$;
COMMIT;

-- 0047 staging_by_time
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 47) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 47 `staging_by_time` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 47;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 47 `staging_by_time` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 47 applied now could undo what later migrations changed. Apply what migration 47 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0047$
-- 0047 staging_by_time: the stager's cost follows the due rows, not the queues. Append-only:
-- change the schema in a new numbered file.
--
-- The stager (job-postgres/src/sql/stage.sql, every worker every poll interval) found the
-- queues holding `scheduled` or `retryable` rows with a loose scan of jobs_due_idx (queue,
-- run_at), one index probe per such queue, due or not, then read each queue's due rows. Its
-- cost grew with the number of queues holding a row due later: 200,000 queues with one row
-- each due in 9999 (which a role that may only enqueue can make) took 1.7-2.2 s a pass that
-- staged nothing, on every worker, every second; per-tenant queues of an ordinary application
-- paid a probe each on every pass. It now reads the due rows themselves, oldest first,
-- through this index, whatever their queue.
--
-- It holds only the waiting rows (`scheduled`, `retryable`), but building it reads the whole
-- table, in this migration's transaction (CREATE INDEX CONCURRENTLY cannot run in one):
-- writes to job.jobs wait while it builds, so on a large table apply it when the queue is
-- quiet.
-- jobs_due_idx stays: the reporter and `job inspect` count the waiting rows per queue.

CREATE INDEX jobs_staging_idx ON job.jobs (run_at)
    WHERE state IN ('scheduled', 'retryable');
$job_migration_0047$;
        INSERT INTO job.schema_migrations (version, name) VALUES (47, 'staging_by_time');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 47 AND name = 'staging_by_time') THEN
        RAISE EXCEPTION 'job migration 47 is recorded in job.schema_migrations as `%`, but this script''s migration 47 is `staging_by_time`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 47);
    END IF;
END
$apply$;
COMMIT;

-- 0048 rescue_names
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 48) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 48 `rescue_names` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 48;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 48 `rescue_names` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 48 applied now could undo what later migrations changed. Apply what migration 48 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0048$
-- 0048 rescue_names: the rescuer says which jobs it rescued and whose leases they were.
-- Append-only: change the schema in a new numbered file.
--
-- job.rescue_expired returned counts only, so the rescuer's log said "rescued 12 jobs" and
-- an operator had to search the jobs' histories for the ones a dead worker left. It now also
-- returns, in lockstep arrays ordered by id, each rescued job's id, kind, the worker whose
-- lease expired (locked_by before the rescue; null when none was recorded) and the state it
-- went to (retryable or discarded). At most in_limit jobs per call, so the arrays are bounded
-- by the rescuer's batch.
--
-- The counts come first and keep their names, so the statement of a worker of an earlier
-- release (which selects retried, discarded and queues_woken by name) reads the new function
-- unchanged. A function's result type cannot be changed in place: it is dropped and created
-- again in this migration's transaction. It stays executable by PUBLIC, as before (it is
-- SECURITY INVOKER: what it may change is what the caller's role may).

DROP FUNCTION job.rescue_expired(integer);

CREATE FUNCTION job.rescue_expired(in_limit integer)
RETURNS TABLE (retried bigint, discarded bigint, queues_woken bigint, jobs bigint[],
               kinds text[], workers text[], states text[])
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET enable_bitmapscan = off
SET jit = off
AS $rescue$
#variable_conflict use_column
DECLARE
    give_key_back boolean := true;
BEGIN
  LOOP
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
        SELECT e.id, e.locked_by
        FROM kinds k
        CROSS JOIN started
        CROSS JOIN LATERAL (
            SELECT j.id, j.locked_by
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
        -- A last attempt whose start was not recorded (started_lease is another lease's
        -- token, or none) never ran its handler: it is not counted, and the job is retried.
        SET state        = CASE WHEN j.attempt >= j.max_attempts AND NOT j.cancel_requested
                                     AND j.started_lease IS NOT DISTINCT FROM j.lock_token
                                THEN 'discarded' ELSE 'retryable' END::job.job_state,
            finalized_at = CASE WHEN j.attempt >= j.max_attempts AND NOT j.cancel_requested
                                     AND j.started_lease IS NOT DISTINCT FROM j.lock_token
                                THEN now() END,
            attempt      = CASE WHEN j.attempt >= j.max_attempts
                                     AND j.started_lease IS DISTINCT FROM j.lock_token
                                THEN j.attempt - 1 ELSE j.attempt END,
            -- Given back as a release of an unstarted job is: no entry (the job returns as
            -- if never claimed, and job_rescued_total counts it as retried).
            errors       = CASE WHEN j.attempt >= j.max_attempts
                                     AND j.started_lease IS DISTINCT FROM j.lock_token
                                THEN j.errors
                                ELSE job.push_error(j.errors, jsonb_build_object(
                                    'attempt', j.attempt,
                                    'at', now(),
                                    'class', 'lease_expired',
                                    'message', format('lease of worker %s expired at %s',
                                                      coalesce(j.locked_by, '(unknown)'),
                                                      j.locked_until))) END,
            -- An `UntilStarted` key spent by the claim of a first attempt that never started
            -- is held again, unless another job took it meanwhile (release.sql's rule).
            unique_scope = CASE WHEN give_key_back
                                     AND j.attempt >= j.max_attempts
                                     AND j.started_lease IS DISTINCT FROM j.lock_token
                                     AND j.attempt = 1 AND j.snoozes = 0
                                     AND j.errors = '[]'::jsonb
                                     AND j.unique_scope = 'spent' AND j.unique_key IS NOT NULL
                                     AND NOT EXISTS (
                                         SELECT 1 FROM job.jobs a
                                         WHERE a.kind = j.kind AND a.unique_key = j.unique_key
                                           AND a.id <> j.id AND (
                                               a.unique_scope = 'pruned'
                                               OR (a.unique_scope = 'finished'
                                                   AND a.state IN ('pending', 'scheduled',
                                                                   'available', 'running',
                                                                   'retryable'))
                                               OR (a.unique_scope = 'started'
                                                   AND a.state IN ('pending', 'scheduled',
                                                                   'available', 'retryable'))))
                                THEN 'started' ELSE j.unique_scope END,
            lock_token   = NULL,
            locked_until = NULL,
            locked_by    = NULL,
            stuck_since  = NULL
        -- By primary key: joined, the rows could be matched by a scan of every running row.
        WHERE j.id = ANY (ARRAY(SELECT expired.id FROM expired))
          AND j.state = 'running' AND j.locked_until < now()
        RETURNING j.id, j.kind, j.state, j.queue
    ),
    woken AS (
        SELECT pg_notify('job_insert', q.queue)
        FROM (SELECT DISTINCT queue FROM rescued WHERE state = 'retryable') q
    )
    -- The worker is read from `expired`: the row the UPDATE returns has its lease cleared.
    -- Both read the same locked row, so the name is the one whose lease expired.
    SELECT count(*) FILTER (WHERE r.state = 'retryable') AS retried,
           count(*) FILTER (WHERE r.state = 'discarded') AS discarded,
           (SELECT count(*) FROM woken) AS queues_woken,
           coalesce(array_agg(r.id ORDER BY r.id), '{}') AS jobs,
           coalesce(array_agg(r.kind ORDER BY r.id), '{}') AS kinds,
           coalesce(array_agg(e.locked_by ORDER BY r.id), '{}') AS workers,
           coalesce(array_agg(r.state::text ORDER BY r.id), '{}') AS states
    FROM rescued r
    JOIN expired e ON e.id = r.id;
    RETURN;
   EXCEPTION WHEN unique_violation THEN
    -- A concurrent enqueue took a key this statement gave back (see the head): once more,
    -- giving none back.
    IF NOT give_key_back THEN
        RAISE;
    END IF;
    give_key_back := false;
   END;
  END LOOP;
END
$rescue$;
$job_migration_0048$;
        INSERT INTO job.schema_migrations (version, name) VALUES (48, 'rescue_names');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 48 AND name = 'rescue_names') THEN
        RAISE EXCEPTION 'job migration 48 is recorded in job.schema_migrations as `%`, but this script''s migration 48 is `rescue_names`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 48);
    END IF;
END
$apply$;
COMMIT;

-- 0049 step_output_bytes
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 49) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 49 `step_output_bytes` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 49;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 49 `step_output_bytes` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 49 applied now could undo what later migrations changed. Apply what migration 49 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0049$
-- 0049 step_output_bytes: a step's size is stored with it, so a page that shows a job's steps
-- reads no output it does not show. Append-only: change the schema in a new numbered file.
--
-- The dashboard's job page shows each step's size, and its output only when that is at most
-- 64 KiB. It computed the size as octet_length(output::text) for every step of the job before
-- its LIMIT: each output decompressed and printed as text, up to 2 MiB each and any number of
-- steps. A review measured 400 steps of 1.9 MB: 8.5 s a view, over the page's statement
-- budget, so the page always failed, and each view held one of the dashboard's connections
-- for seconds.
--
-- Now step_save.sql stores the byte length of the JSON text the worker wrote (output_bytes),
-- and inspect_steps_shown.sql takes its first steps before reading any size, and reads the
-- stored size. Rows written before this migration, or by a writer that does not set it, have
-- none: their size is computed as before, for the steps shown only.
--
-- ADD COLUMN without a default does not rewrite the table.

ALTER TABLE job.steps
    ADD COLUMN output_bytes integer
        CONSTRAINT steps_output_bytes_check CHECK (output_bytes >= 0);
$job_migration_0049$;
        INSERT INTO job.schema_migrations (version, name) VALUES (49, 'step_output_bytes');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 49 AND name = 'step_output_bytes') THEN
        RAISE EXCEPTION 'job migration 49 is recorded in job.schema_migrations as `%`, but this script''s migration 49 is `step_output_bytes`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 49);
    END IF;
END
$apply$;
COMMIT;

-- 0050 claim_by_version
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 50) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 50 `claim_by_version` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 50;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 50 `claim_by_version` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 50 applied now could undo what later migrations changed. Apply what migration 50 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0050$
-- 0050 claim_by_version: a claim never reads the jobs of a payload version newer than its
-- worker decodes. Append-only: change the schema in a new numbered file.
--
-- job.claim read each kind's available jobs through jobs_claim_idx (queue, kind, priority,
-- run_at, id) and compared payload_version on the table row. During a rolling deploy the new
-- release enqueues jobs of version 2 while workers of the old one, which decode version 1
-- only, still claim: every claim of theirs, idle polls included, read every waiting job of
-- version 2 of the kind (100,000 of them: 20-29 ms a claim on a scratch database, growing with
-- the backlog), and every enqueue's notification woke each old worker to read them again.
--
-- jobs_claim_version_idx puts payload_version after kind. Per kind, the claim finds the
-- versions it decodes that have available jobs (one index probe each, the loose index scan of
-- claim_rated.sql's keys; an application keeps a handful of versions of a kind at once), reads
-- each version's jobs in claim order, at most the kind's room, and merges them in that order.
-- So it reads what it returns and one probe per version, whatever waits of a newer version.
-- Each version's scan locks its rows before the merge keeps the kind's room of them, as the
-- kinds' scans already did before the claim's own LIMIT: the rows it locked and left are
-- free again when the claim's transaction ends, and other claims skip them meanwhile.
--
-- The update reaches the picked rows by their row addresses as an array (a TID scan), not by
-- joining the picked set: the versions' merge is planned as many rows, and a join with as
-- many was planned as a hash join over a scan of the whole table (20,003 rows read to claim 3).
--
-- jobs_claim_idx stays: the rate-limited claim, the bound on the rate-limited kinds (job.claim's
-- `bound`), the limited kinds' due check, the reporter and the dashboard read a kind's jobs in
-- claim order whatever their version. The rate-limited claim (claim_rated.sql) still reads
-- the jobs of a newer version ahead of what it takes (its header says so).
--
-- The index holds only the available rows, but building it reads the whole table, in this
-- migration's transaction (CREATE INDEX CONCURRENTLY cannot run in one): writes to job.jobs
-- wait while it builds, so on a large table apply it when the queue is quiet.

CREATE INDEX jobs_claim_version_idx ON job.jobs (queue, kind, payload_version, priority, run_at, id)
    WHERE state = 'available';

CREATE OR REPLACE FUNCTION job.claim(in_queue text, in_kinds text[], in_versions integer[], in_leases bigint[], in_max integer, in_worker text, in_caps integer[], in_ahead_of text[])
 RETURNS TABLE(id bigint, lock_token uuid, kind text, queue text, priority smallint, payload text, payload_version integer, attempt integer, max_attempts integer, snoozes integer, trace_context text, waited_ms bigint)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH bound AS MATERIALIZED (
        SELECT coalesce(h.priority, 32767::smallint) AS priority,
               coalesce(h.run_at, 'infinity'::timestamptz) AS run_at,
               coalesce(h.id, 9223372036854775807) AS id
        FROM (SELECT 1) AS one
        LEFT JOIN LATERAL (
            SELECT f.priority, f.run_at, f.id
            FROM unnest($8::text[]) AS r(kind)
            CROSS JOIN LATERAL (
                SELECT j.priority, j.run_at, j.id
                FROM job.jobs j
                WHERE j.queue = $1::text
                  AND j.kind = r.kind
                  AND j.state = 'available'
                ORDER BY j.priority, j.run_at, j.id
                LIMIT 1
            ) f
            ORDER BY 1, 2, 3
            LIMIT 1
        ) h ON true
    ),
    k AS (
        SELECT k.kind, k.version, k.cap
        FROM unnest($2::text[], $3::integer[], $7::integer[]) AS k(kind, version, cap)
        WHERE NOT EXISTS (SELECT 1 FROM job.pauses p
                          WHERE p.scope = 'kind' AND p.name = k.kind
                            AND (p.resume_at IS NULL OR p.resume_at > now()))
          AND NOT EXISTS (SELECT 1 FROM job.pauses p
                          WHERE p.scope = 'queue' AND p.name = $1::text
                            AND (p.resume_at IS NULL OR p.resume_at > now()))
    ),
    -- Running rows of a limited kind are counted through jobs_rescue_idx (locked_until IS NOT
    -- NULL is running, by jobs_lease_check): no extra index on the hot path.
    room AS MATERIALIZED (
        SELECT k.kind, k.version,
               CASE WHEN k.cap IS NULL THEN $5::integer
                    ELSE least($5::integer,
                               k.cap - (SELECT count(*) FROM job.jobs r
                                        WHERE r.locked_until IS NOT NULL AND r.kind = k.kind)::integer)
               END AS room,
               bound.priority AS before_priority, bound.run_at AS before_run_at,
               bound.id AS before_id
        FROM k
        CROSS JOIN bound
    ),
    -- Per kind, the payload versions waiting that this worker decodes (at most room.version),
    -- each found by one probe of jobs_claim_version_idx (a loose index scan), then each
    -- version's jobs read in claim order and the versions' rows merged: the jobs of a newer
    -- version are never read. The probes go from the newest version down: each lands on the
    -- end of its version's range, among the jobs enqueued last, where an ascending probe
    -- would start at the jobs claimed first and step over their index entries until a
    -- VACUUM removes them, as the version's own scan then does once more.
    picked AS (
        SELECT c.tid, c.id, c.priority, c.run_at
        FROM room
        CROSS JOIN LATERAL (
            WITH RECURSIVE versions(version) AS (
                (SELECT j.payload_version
                 FROM job.jobs j
                 WHERE j.queue = $1::text
                   AND j.kind = room.kind
                   AND j.state = 'available'
                   AND j.payload_version <= room.version
                 ORDER BY j.payload_version DESC
                 LIMIT 1)
                UNION ALL
                SELECT (SELECT j.payload_version
                        FROM job.jobs j
                        WHERE j.queue = $1::text
                          AND j.kind = room.kind
                          AND j.state = 'available'
                          AND j.payload_version < v.version
                        ORDER BY j.payload_version DESC
                        LIMIT 1)
                FROM versions v
                WHERE v.version IS NOT NULL
            )
            SELECT f.tid, f.id, f.priority, f.run_at
            FROM versions v
            CROSS JOIN LATERAL (
                SELECT j.ctid AS tid, j.id, j.priority, j.run_at
                FROM job.jobs j
                WHERE j.queue = $1::text
                  AND j.kind = room.kind
                  AND j.state = 'available'
                  AND j.payload_version = v.version
                  AND (j.priority, j.run_at, j.id)
                      < (room.before_priority, room.before_run_at, room.before_id)
                  AND j.run_at <= now()
                  AND (j.deadline IS NULL OR j.deadline > now())
                  AND NOT j.cancel_requested
                  AND j.attempt < 2147483646
                ORDER BY j.priority, j.run_at, j.id
                LIMIT room.room
                FOR NO KEY UPDATE SKIP LOCKED
            ) f
            WHERE v.version IS NOT NULL
            ORDER BY f.priority, f.run_at, f.id
            LIMIT room.room
        ) c
        WHERE room.room > 0
        ORDER BY c.priority, c.run_at, c.id
        LIMIT $5::integer
    ),
    claimed AS (
        UPDATE job.jobs j
        SET state        = 'running',
            attempt      = j.attempt + 1,
            lock_token   = gen_random_uuid(),
            locked_by    = $6::text,
            locked_until = now()
                + ($4::bigint[])[array_position($2::text[], j.kind)] * interval '1 millisecond',
            unique_scope = CASE WHEN j.unique_scope = 'started' THEN 'spent' ELSE j.unique_scope END
        WHERE j.ctid = ANY (ARRAY(SELECT picked.tid FROM picked))
        RETURNING j.id, j.lock_token, j.kind, j.queue, j.priority, j.payload, j.payload_version,
                  j.attempt, j.max_attempts, j.snoozes, j.run_at, j.trace_context
    )
    SELECT id, lock_token, kind, queue, priority, payload::text AS payload, payload_version,
           attempt, max_attempts, snoozes, trace_context,
           greatest(0, extract(epoch FROM now() - run_at) * 1000)::bigint AS waited_ms
    FROM claimed
    ORDER BY priority, run_at, id;
END
$function$;
$job_migration_0050$;
        INSERT INTO job.schema_migrations (version, name) VALUES (50, 'claim_by_version');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 50 AND name = 'claim_by_version') THEN
        RAISE EXCEPTION 'job migration 50 is recorded in job.schema_migrations as `%`, but this script''s migration 50 is `claim_by_version`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 50);
    END IF;
END
$apply$;
COMMIT;

-- 0051 rate_claim_by_version
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 51) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 51 `rate_claim_by_version` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 51;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 51 `rate_claim_by_version` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 51 applied now could undo what later migrations changed. Apply what migration 51 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0051$
-- 0051 rate_claim_by_version: the rate-limited claim never reads the jobs of a payload version
-- newer than its worker decodes. Append-only: change the schema in a new numbered file.
--
-- Migration 0050 gave job.claim this; the rate-limited claim (claim_rated.sql) still read each
-- key's jobs through jobs_rate_key_idx (queue, kind, rate_key, priority, run_at, id) and its
-- jobs without a key through jobs_claim_idx, comparing payload_version on the table row. So
-- during a rolling deploy every claim of an old worker, under the kind's advisory lock, read
-- each waiting job of the new release's version ahead of what it took (100,000 of them: about
-- 70 ms a claim).
--
-- jobs_rate_key_version_idx puts payload_version after rate_key and replaces
-- jobs_rate_key_idx: the claim's probe for the next key with waiting jobs reads the same
-- leading columns, and per key it finds the versions it decodes (one probe each, from the
-- newest down, as job.claim does) and reads each version's jobs in claim order, at most the
-- key's room. The jobs without a key are looked for among the kind's first 100 jobs the worker
-- could take per version it decodes, through jobs_claim_version_idx, merged in claim order.
--
-- The index holds only the available rows with a key, but building it reads the whole table,
-- in this migration's transaction (CREATE INDEX CONCURRENTLY cannot run in one): writes to
-- job.jobs wait while it builds, so on a large table apply it when the queue is quiet.

CREATE INDEX jobs_rate_key_version_idx
    ON job.jobs (queue, kind, rate_key, payload_version, priority, run_at, id)
    WHERE state = 'available' AND rate_key IS NOT NULL;

DROP INDEX job.jobs_rate_key_idx;
$job_migration_0051$;
        INSERT INTO job.schema_migrations (version, name) VALUES (51, 'rate_claim_by_version');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 51 AND name = 'rate_claim_by_version') THEN
        RAISE EXCEPTION 'job migration 51 is recorded in job.schema_migrations as `%`, but this script''s migration 51 is `rate_claim_by_version`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 51);
    END IF;
END
$apply$;
COMMIT;

-- 0052 door_arguments
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 52) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 52 `door_arguments` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 52;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 52 `door_arguments` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 52 applied now could undo what later migrations changed. Apply what migration 52 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0052$
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
$job_migration_0052$;
        INSERT INTO job.schema_migrations (version, name) VALUES (52, 'door_arguments');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 52 AND name = 'door_arguments') THEN
        RAISE EXCEPTION 'job migration 52 is recorded in job.schema_migrations as `%`, but this script''s migration 52 is `door_arguments`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 52);
    END IF;
END
$apply$;
COMMIT;

-- 0053 enqueue_problem_for_workers
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 53) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 53 `enqueue_problem_for_workers` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 53;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 53 `enqueue_problem_for_workers` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 53 applied now could undo what later migrations changed. Apply what migration 53 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0053$
-- 0053 enqueue_problem_for_workers: a worker role's refused unique enqueue names its argument.
-- Append-only: change the schema in a new numbered file.
--
-- Migration 0052 made job.enqueue_unique (the Rust producer's function, run with its caller's
-- privileges) ask job.enqueue_problem why its arguments fail its quick test. EXECUTE on
-- job.enqueue_problem, and on the job.admission_problem and job.time_problem it calls, is
-- revoked from PUBLIC (migration 0007) and granted to no worker role (0032), so a worker
-- role's keyed enqueue that broke a rule (a priority of -1, a key of 600 bytes, sent past
-- the Rust checks through job_postgres::enqueue) failed with 42501 "permission denied for
-- function enqueue_problem" instead of the named refusal (before 0052: 23514 from the table).
--
-- job.enqueue_problem now runs as the schema's owner (its calls of the other two with it)
-- and PUBLIC may execute it: it gives nothing, reading only its arguments and the payload
-- limit of job.settings, which every enqueue's refusal already says. Its search_path is
-- pinned, as every SECURITY DEFINER function of the schema's is.

ALTER FUNCTION job.enqueue_problem(text, jsonb, text, integer, integer, timestamptz, integer,
                                   text, text, text, text[], text, timestamptz)
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp;

GRANT EXECUTE ON FUNCTION job.enqueue_problem(text, jsonb, text, integer, integer,
                                              timestamptz, integer, text, text, text, text[],
                                              text, timestamptz) TO PUBLIC;
$job_migration_0053$;
        INSERT INTO job.schema_migrations (version, name) VALUES (53, 'enqueue_problem_for_workers');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 53 AND name = 'enqueue_problem_for_workers') THEN
        RAISE EXCEPTION 'job migration 53 is recorded in job.schema_migrations as `%`, but this script''s migration 53 is `enqueue_problem_for_workers`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 53);
    END IF;
END
$apply$;
COMMIT;

-- 0054 rescue_limit
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 54) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 54 `rescue_limit` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 54;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 54 `rescue_limit` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 54 applied now could undo what later migrations changed. Apply what migration 54 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0054$
-- 0054 rescue_limit: job.rescue_expired names the count it refuses. Append-only: change the
-- schema in a new numbered file.
--
-- Migration 0052 made job.ordering_wake_up and job.dependencies_resolve refuse a negative or
-- NULL count, naming it; job.rescue_expired was left as it was. Called with -1 it answered
-- zeros while no lease had expired and failed with "LIMIT must not be negative" once one
-- had, and with NULL it rescued every expired lease at once (LIMIT NULL is no limit), in one
-- statement, however large the backlog. It now refuses both with 22023 naming `in_limit`, in
-- the other two functions' words. No upper bound: the rescuer sends its batch (a u32 capped
-- at 2,147,483,647), and a large count only stops at the work there is. The rescuer itself
-- never sends either (Store::rescue_expired takes a u32).
--
-- As in migration 0048, with that check first. CREATE OR REPLACE keeps the function's owner
-- and grants (executable by PUBLIC; SECURITY INVOKER) and sets its settings anew.

CREATE OR REPLACE FUNCTION job.rescue_expired(in_limit integer)
RETURNS TABLE (retried bigint, discarded bigint, queues_woken bigint, jobs bigint[],
               kinds text[], workers text[], states text[])
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET enable_bitmapscan = off
SET jit = off
AS $rescue$
#variable_conflict use_column
DECLARE
    give_key_back boolean := true;
BEGIN
  IF in_limit IS NULL OR in_limit < 0 THEN
    RAISE EXCEPTION 'invalid rescue_expired argument `in_limit`: must be 0 or more '
                    '(the most jobs to rescue), got %', coalesce(in_limit::text, 'null')
        USING ERRCODE = 'invalid_parameter_value';
  END IF;
  LOOP
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
        SELECT e.id, e.locked_by
        FROM kinds k
        CROSS JOIN started
        CROSS JOIN LATERAL (
            SELECT j.id, j.locked_by
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
        -- A last attempt whose start was not recorded (started_lease is another lease's
        -- token, or none) never ran its handler: it is not counted, and the job is retried.
        SET state        = CASE WHEN j.attempt >= j.max_attempts AND NOT j.cancel_requested
                                     AND j.started_lease IS NOT DISTINCT FROM j.lock_token
                                THEN 'discarded' ELSE 'retryable' END::job.job_state,
            finalized_at = CASE WHEN j.attempt >= j.max_attempts AND NOT j.cancel_requested
                                     AND j.started_lease IS NOT DISTINCT FROM j.lock_token
                                THEN now() END,
            attempt      = CASE WHEN j.attempt >= j.max_attempts
                                     AND j.started_lease IS DISTINCT FROM j.lock_token
                                THEN j.attempt - 1 ELSE j.attempt END,
            -- Given back as a release of an unstarted job is: no entry (the job returns as
            -- if never claimed, and job_rescued_total counts it as retried).
            errors       = CASE WHEN j.attempt >= j.max_attempts
                                     AND j.started_lease IS DISTINCT FROM j.lock_token
                                THEN j.errors
                                ELSE job.push_error(j.errors, jsonb_build_object(
                                    'attempt', j.attempt,
                                    'at', now(),
                                    'class', 'lease_expired',
                                    'message', format('lease of worker %s expired at %s',
                                                      coalesce(j.locked_by, '(unknown)'),
                                                      j.locked_until))) END,
            -- An `UntilStarted` key spent by the claim of a first attempt that never started
            -- is held again, unless another job took it meanwhile (release.sql's rule).
            unique_scope = CASE WHEN give_key_back
                                     AND j.attempt >= j.max_attempts
                                     AND j.started_lease IS DISTINCT FROM j.lock_token
                                     AND j.attempt = 1 AND j.snoozes = 0
                                     AND j.errors = '[]'::jsonb
                                     AND j.unique_scope = 'spent' AND j.unique_key IS NOT NULL
                                     AND NOT EXISTS (
                                         SELECT 1 FROM job.jobs a
                                         WHERE a.kind = j.kind AND a.unique_key = j.unique_key
                                           AND a.id <> j.id AND (
                                               a.unique_scope = 'pruned'
                                               OR (a.unique_scope = 'finished'
                                                   AND a.state IN ('pending', 'scheduled',
                                                                   'available', 'running',
                                                                   'retryable'))
                                               OR (a.unique_scope = 'started'
                                                   AND a.state IN ('pending', 'scheduled',
                                                                   'available', 'retryable'))))
                                THEN 'started' ELSE j.unique_scope END,
            lock_token   = NULL,
            locked_until = NULL,
            locked_by    = NULL,
            stuck_since  = NULL
        -- By primary key: joined, the rows could be matched by a scan of every running row.
        WHERE j.id = ANY (ARRAY(SELECT expired.id FROM expired))
          AND j.state = 'running' AND j.locked_until < now()
        RETURNING j.id, j.kind, j.state, j.queue
    ),
    woken AS (
        SELECT pg_notify('job_insert', q.queue)
        FROM (SELECT DISTINCT queue FROM rescued WHERE state = 'retryable') q
    )
    -- The worker is read from `expired`: the row the UPDATE returns has its lease cleared.
    -- Both read the same locked row, so the name is the one whose lease expired.
    SELECT count(*) FILTER (WHERE r.state = 'retryable') AS retried,
           count(*) FILTER (WHERE r.state = 'discarded') AS discarded,
           (SELECT count(*) FROM woken) AS queues_woken,
           coalesce(array_agg(r.id ORDER BY r.id), '{}') AS jobs,
           coalesce(array_agg(r.kind ORDER BY r.id), '{}') AS kinds,
           coalesce(array_agg(e.locked_by ORDER BY r.id), '{}') AS workers,
           coalesce(array_agg(r.state::text ORDER BY r.id), '{}') AS states
    FROM rescued r
    JOIN expired e ON e.id = r.id;
    RETURN;
   EXCEPTION WHEN unique_violation THEN
    -- A concurrent enqueue took a key this statement gave back (see the head): once more,
    -- giving none back.
    IF NOT give_key_back THEN
        RAISE;
    END IF;
    give_key_back := false;
   END;
  END LOOP;
END
$rescue$;
$job_migration_0054$;
        INSERT INTO job.schema_migrations (version, name) VALUES (54, 'rescue_limit');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 54 AND name = 'rescue_limit') THEN
        RAISE EXCEPTION 'job migration 54 is recorded in job.schema_migrations as `%`, but this script''s migration 54 is `rescue_limit`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 54);
    END IF;
END
$apply$;
COMMIT;

-- 0055 claim_arguments
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 55) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 55 `claim_arguments` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 55;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 55 `claim_arguments` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 55 applied now could undo what later migrations changed. Apply what migration 55 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0055$
-- 0055 claim_arguments: job.claim names the argument it refuses. Append-only: change the
-- schema in a new numbered file.
--
-- Migrations 0052 and 0054 made the stager's and the rescuer's functions refuse a negative or
-- NULL count, naming it; job.claim, the worker's own function, was left as it was. Called by
-- hand or by another client: `in_max` -1 failed with "LIMIT must not be negative", and NULL
-- claimed nothing of a kind without a cap and a capped kind's free room (least(NULL, room));
-- a lease of 0 or less claimed jobs whose lease had already run out (the rescuer then gave
-- them back, a claim for nothing); a NULL lease, or a lease array shorter than the kinds',
-- failed on the table's jobs_lease_check with the row in the error's detail, and longer
-- arrays, or versions or caps of another length, were padded with NULL (a kind without a
-- version claimed nothing, one without a cap had none); a NULL queue or kind array claimed
-- nothing, and a NULL worker wrote a lease without a holder, without a word.
--
-- It now refuses, with 22023 naming the argument, in the words of 0052 and 0054: a NULL
-- argument; `in_kinds`, `in_versions`, `in_leases` and `in_caps` that are not one-dimensional
-- arrays from 1 of one length (one item per kind, in lockstep: each kind's lease is found by
-- its position); a lease, in milliseconds, below 1 or above 100 years (job::MAX_DURATION, the
-- longest a worker's `build()` takes); and `in_max` NULL or below 0. No upper bound on
-- `in_max`: the worker sends its batch, a u32 capped at 2,147,483,647. An item of an array
-- may still be NULL where that claims nothing (a kind, a version) or means no limit (a cap),
-- as the worker sends it. The checks are plain PL/pgSQL expressions before the statement,
-- which is unchanged: nothing the claim's plan or its cost per row depends on. The claim of
-- a rate-limited kind is a statement the worker sends (claim_rated.sql), not this function,
-- and is not checked here; the worker never sends a lease outside these bounds (`build()`
-- refuses them).
--
-- As in migration 0050, with those checks first. CREATE OR REPLACE keeps the function's owner
-- and grants and sets its settings anew.

CREATE OR REPLACE FUNCTION job.claim(in_queue text, in_kinds text[], in_versions integer[], in_leases bigint[], in_max integer, in_worker text, in_caps integer[], in_ahead_of text[])
 RETURNS TABLE(id bigint, lock_token uuid, kind text, queue text, priority smallint, payload text, payload_version integer, attempt integer, max_attempts integer, snoozes integer, trace_context text, waited_ms bigint)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
AS $function$
#variable_conflict use_column
BEGIN
    IF in_max IS NULL OR in_max < 0 THEN
        RAISE EXCEPTION 'invalid claim argument `in_max`: must be 0 or more (the most jobs to '
                        'claim), got %', coalesce(in_max::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF in_queue IS NULL OR in_kinds IS NULL OR in_versions IS NULL OR in_leases IS NULL
       OR in_worker IS NULL OR in_caps IS NULL OR in_ahead_of IS NULL THEN
        RAISE EXCEPTION 'invalid claim argument `%`: must not be null',
            CASE WHEN in_queue IS NULL THEN 'in_queue'
                 WHEN in_kinds IS NULL THEN 'in_kinds'
                 WHEN in_versions IS NULL THEN 'in_versions'
                 WHEN in_leases IS NULL THEN 'in_leases'
                 WHEN in_worker IS NULL THEN 'in_worker'
                 WHEN in_caps IS NULL THEN 'in_caps'
                 ELSE 'in_ahead_of' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(in_versions) <> cardinality(in_kinds)
       OR cardinality(in_leases) <> cardinality(in_kinds)
       OR cardinality(in_caps) <> cardinality(in_kinds)
       OR (cardinality(in_kinds) > 0
           AND (array_ndims(in_kinds) <> 1 OR array_lower(in_kinds, 1) <> 1
                OR array_ndims(in_versions) <> 1 OR array_lower(in_versions, 1) <> 1
                OR array_ndims(in_leases) <> 1 OR array_lower(in_leases, 1) <> 1
                OR array_ndims(in_caps) <> 1 OR array_lower(in_caps, 1) <> 1)) THEN
        RAISE EXCEPTION 'invalid claim arguments `in_kinds`, `in_versions`, `in_leases`, '
                        '`in_caps`: must be one-dimensional arrays from 1 of one length (one '
                        'item per kind), got %, %, %, %',
            coalesce(array_dims(in_kinds), 'empty'), coalesce(array_dims(in_versions), 'empty'),
            coalesce(array_dims(in_leases), 'empty'), coalesce(array_dims(in_caps), 'empty')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(in_leases) AS l(ms)
               WHERE l.ms IS NULL OR l.ms < 1 OR l.ms > 3153600000000) THEN
        RAISE EXCEPTION 'invalid claim argument `in_leases`: each lease must be 1 to '
                        '3153600000000 milliseconds (100 years), got %',
            (SELECT coalesce(l.ms::text, 'null') FROM unnest(in_leases) AS l(ms)
             WHERE l.ms IS NULL OR l.ms < 1 OR l.ms > 3153600000000 LIMIT 1)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    WITH bound AS MATERIALIZED (
        SELECT coalesce(h.priority, 32767::smallint) AS priority,
               coalesce(h.run_at, 'infinity'::timestamptz) AS run_at,
               coalesce(h.id, 9223372036854775807) AS id
        FROM (SELECT 1) AS one
        LEFT JOIN LATERAL (
            SELECT f.priority, f.run_at, f.id
            FROM unnest($8::text[]) AS r(kind)
            CROSS JOIN LATERAL (
                SELECT j.priority, j.run_at, j.id
                FROM job.jobs j
                WHERE j.queue = $1::text
                  AND j.kind = r.kind
                  AND j.state = 'available'
                ORDER BY j.priority, j.run_at, j.id
                LIMIT 1
            ) f
            ORDER BY 1, 2, 3
            LIMIT 1
        ) h ON true
    ),
    k AS (
        SELECT k.kind, k.version, k.cap
        FROM unnest($2::text[], $3::integer[], $7::integer[]) AS k(kind, version, cap)
        WHERE NOT EXISTS (SELECT 1 FROM job.pauses p
                          WHERE p.scope = 'kind' AND p.name = k.kind
                            AND (p.resume_at IS NULL OR p.resume_at > now()))
          AND NOT EXISTS (SELECT 1 FROM job.pauses p
                          WHERE p.scope = 'queue' AND p.name = $1::text
                            AND (p.resume_at IS NULL OR p.resume_at > now()))
    ),
    -- Running rows of a limited kind are counted through jobs_rescue_idx (locked_until IS NOT
    -- NULL is running, by jobs_lease_check): no extra index on the hot path.
    room AS MATERIALIZED (
        SELECT k.kind, k.version,
               CASE WHEN k.cap IS NULL THEN $5::integer
                    ELSE least($5::integer,
                               k.cap - (SELECT count(*) FROM job.jobs r
                                        WHERE r.locked_until IS NOT NULL AND r.kind = k.kind)::integer)
               END AS room,
               bound.priority AS before_priority, bound.run_at AS before_run_at,
               bound.id AS before_id
        FROM k
        CROSS JOIN bound
    ),
    -- Per kind, the payload versions waiting that this worker decodes (at most room.version),
    -- each found by one probe of jobs_claim_version_idx (a loose index scan), then each
    -- version's jobs read in claim order and the versions' rows merged: the jobs of a newer
    -- version are never read. The probes go from the newest version down: each lands on the
    -- end of its version's range, among the jobs enqueued last, where an ascending probe
    -- would start at the jobs claimed first and step over their index entries until a
    -- VACUUM removes them, as the version's own scan then does once more.
    picked AS (
        SELECT c.tid, c.id, c.priority, c.run_at
        FROM room
        CROSS JOIN LATERAL (
            WITH RECURSIVE versions(version) AS (
                (SELECT j.payload_version
                 FROM job.jobs j
                 WHERE j.queue = $1::text
                   AND j.kind = room.kind
                   AND j.state = 'available'
                   AND j.payload_version <= room.version
                 ORDER BY j.payload_version DESC
                 LIMIT 1)
                UNION ALL
                SELECT (SELECT j.payload_version
                        FROM job.jobs j
                        WHERE j.queue = $1::text
                          AND j.kind = room.kind
                          AND j.state = 'available'
                          AND j.payload_version < v.version
                        ORDER BY j.payload_version DESC
                        LIMIT 1)
                FROM versions v
                WHERE v.version IS NOT NULL
            )
            SELECT f.tid, f.id, f.priority, f.run_at
            FROM versions v
            CROSS JOIN LATERAL (
                SELECT j.ctid AS tid, j.id, j.priority, j.run_at
                FROM job.jobs j
                WHERE j.queue = $1::text
                  AND j.kind = room.kind
                  AND j.state = 'available'
                  AND j.payload_version = v.version
                  AND (j.priority, j.run_at, j.id)
                      < (room.before_priority, room.before_run_at, room.before_id)
                  AND j.run_at <= now()
                  AND (j.deadline IS NULL OR j.deadline > now())
                  AND NOT j.cancel_requested
                  AND j.attempt < 2147483646
                ORDER BY j.priority, j.run_at, j.id
                LIMIT room.room
                FOR NO KEY UPDATE SKIP LOCKED
            ) f
            WHERE v.version IS NOT NULL
            ORDER BY f.priority, f.run_at, f.id
            LIMIT room.room
        ) c
        WHERE room.room > 0
        ORDER BY c.priority, c.run_at, c.id
        LIMIT $5::integer
    ),
    claimed AS (
        UPDATE job.jobs j
        SET state        = 'running',
            attempt      = j.attempt + 1,
            lock_token   = gen_random_uuid(),
            locked_by    = $6::text,
            locked_until = now()
                + ($4::bigint[])[array_position($2::text[], j.kind)] * interval '1 millisecond',
            unique_scope = CASE WHEN j.unique_scope = 'started' THEN 'spent' ELSE j.unique_scope END
        WHERE j.ctid = ANY (ARRAY(SELECT picked.tid FROM picked))
        RETURNING j.id, j.lock_token, j.kind, j.queue, j.priority, j.payload, j.payload_version,
                  j.attempt, j.max_attempts, j.snoozes, j.run_at, j.trace_context
    )
    SELECT id, lock_token, kind, queue, priority, payload::text AS payload, payload_version,
           attempt, max_attempts, snoozes, trace_context,
           greatest(0, extract(epoch FROM now() - run_at) * 1000)::bigint AS waited_ms
    FROM claimed
    ORDER BY priority, run_at, id;
END
$function$;
$job_migration_0055$;
        INSERT INTO job.schema_migrations (version, name) VALUES (55, 'claim_arguments');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 55 AND name = 'claim_arguments') THEN
        RAISE EXCEPTION 'job migration 55 is recorded in job.schema_migrations as `%`, but this script''s migration 55 is `claim_arguments`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 55);
    END IF;
END
$apply$;
COMMIT;

-- 0056 key_arguments
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 56) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 56 `key_arguments` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 56;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 56 `key_arguments` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 56 applied now could undo what later migrations changed. Apply what migration 56 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0056$
-- 0056 key_arguments: job.set_ordering_key and job.set_rate_key name the key they refuse.
-- Append-only: change the schema in a new numbered file.
--
-- Both give a job inserted by job.enqueue_unique its key (the Rust producer's
-- enqueue_unique.sql, and job.enqueue), granted to the worker and producer roles. Called by
-- hand with a key of 0 or over 512 bytes, each was refused by the table's check
-- (jobs_ordering_key_check, jobs_rate_key_check), whose error detail holds the whole row: a
-- megabyte-long key came back in the error, whole, beside the job's payload. They now refuse it
-- first with 22023 naming the argument, in job.enqueue's words ("must be 1 to 512 bytes, got
-- N"). A NULL key still clears the job's key, and a job that does not exist is still answered
-- NULL, as before. Plain PL/pgSQL, not SQL, for the check; an UPDATE inside a volatile
-- PL/pgSQL function sees the row job.enqueue_unique inserted earlier in the same statement, as
-- the SQL function's did. Their search_path gains pg_temp at its end (it was pg_catalog
-- alone, where pg_temp is searched first). CREATE OR REPLACE keeps each function's owner and
-- grants.

CREATE OR REPLACE FUNCTION job.set_ordering_key(job_id bigint, key text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF octet_length(key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'invalid set_ordering_key argument `key`: must be 1 to 512 bytes, got %',
                octet_length(key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE job.jobs SET ordering_key = key WHERE id = job_id;
    RETURN CASE WHEN FOUND THEN true END;
END
$$;

CREATE OR REPLACE FUNCTION job.set_rate_key(job_id bigint, key text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF octet_length(key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'invalid set_rate_key argument `key`: must be 1 to 512 bytes, got %',
                octet_length(key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE job.jobs SET rate_key = key WHERE id = job_id;
    RETURN CASE WHEN FOUND THEN true END;
END
$$;
$job_migration_0056$;
        INSERT INTO job.schema_migrations (version, name) VALUES (56, 'key_arguments');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 56 AND name = 'key_arguments') THEN
        RAISE EXCEPTION 'job migration 56 is recorded in job.schema_migrations as `%`, but this script''s migration 56 is `key_arguments`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 56);
    END IF;
END
$apply$;
COMMIT;

-- 0057 set_based_cascades
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 57) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 57 `set_based_cascades` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 57;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 57 `set_based_cascades` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 57 applied now could undo what later migrations changed. Apply what migration 57 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0057$
-- 0057 set_based_cascades: a job's steps and dependency edges go with it in one statement per
-- DELETE, not one per job. Append-only: change the schema in a new numbered file.
--
-- job.steps.job_id (migration 0003) and job.dependencies.job_id (migration 0037) had foreign
-- keys to job.jobs with ON DELETE CASCADE. PostgreSQL runs a foreign key's cascade as a
-- trigger per deleted row, each a query of the referencing table of its own: pruning 1,000
-- completed jobs spent 2.6 ms in the steps key's trigger and 2.3 ms in the edges' key's, of
-- 7.0 ms (EXPLAIN ANALYZE of prune.sql), and the pruner's batches of 1,000 (prune_pick.sql and
-- prune.sql in a transaction each) took 9.2 µs a job with the keys, 4.3 µs without them
-- (200,000 completed jobs, this machine): a cost paid for every job the framework keeps and
-- then prunes, though few have steps or edges.
--
-- The keys are replaced by what they did, in set-based triggers:
-- * after each DELETE of job.jobs, a statement-level trigger deletes the steps and the
--   dependents' edges of the jobs it deleted (its transition table), each table read by its
--   primary key's leading column through an array, so a batch looks its rows up instead of
--   joining the whole table; for every DELETE, a raw one too, as the cascades did;
-- * after a TRUNCATE of job.jobs, the steps and edges are truncated too (the keys refused a
--   TRUNCATE of job.jobs without CASCADE, and CASCADE emptied both);
-- * a step or an edge written for a job that does not exist is refused as the keys refused
--   it (SQLSTATE 23503, naming the key that was: steps_job_id_fkey, dependencies_job_id_fkey),
--   and one written for a job locks the job's row FOR KEY SHARE until it commits, as a key's
--   check does: a DELETE of that job waits for it, then deletes it (the trigger's statements
--   see what committed before them), or, deleted first, the write finds no job and is refused.
-- Each function is SECURITY DEFINER, as a key's cascade and check run as the tables' owner: a
-- role that may delete jobs (the pruner's, an operator's purge) need not be granted the steps
-- or the edges. The edges pointing at a job (depends_on) still keep no key (migration 0037).
--
-- The keys are dropped under locks taken in the order every writer takes the tables, job.jobs
-- first (migration 0037): an enqueue with dependencies writes a job, then its edges; a step's
-- save locks its job's row, then writes the step.

LOCK TABLE job.jobs IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE job.steps, job.dependencies IN ACCESS EXCLUSIVE MODE;

ALTER TABLE job.steps DROP CONSTRAINT steps_job_id_fkey;
ALTER TABLE job.dependencies DROP CONSTRAINT dependencies_job_id_fkey;

CREATE FUNCTION job.delete_job_rows() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM job.steps s WHERE s.job_id = ANY (ARRAY(SELECT g.id FROM gone g));
    DELETE FROM job.dependencies d WHERE d.job_id = ANY (ARRAY(SELECT g.id FROM gone g));
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_delete_job_rows AFTER DELETE ON job.jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION job.delete_job_rows();

CREATE FUNCTION job.truncate_job_rows() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    TRUNCATE job.steps, job.dependencies;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_truncate_job_rows AFTER TRUNCATE ON job.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION job.truncate_job_rows();

-- TG_ARGV[0]: the name of the key the check stands for.
CREATE FUNCTION job.check_job_exists() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- A NULL is left to the column's NOT NULL, as a key leaves it.
    IF NEW.job_id IS NULL THEN
        RETURN NEW;
    END IF;
    PERFORM FROM job.jobs j WHERE j.id = NEW.job_id FOR KEY SHARE OF j;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'insert or update on table "%" violates foreign key constraint "%"',
                TG_TABLE_NAME, TG_ARGV[0]
            USING ERRCODE = 'foreign_key_violation',
                  CONSTRAINT = TG_ARGV[0],
                  TABLE = TG_TABLE_NAME,
                  SCHEMA = TG_TABLE_SCHEMA,
                  DETAIL = format('Key (job_id)=(%s) is not present in table "jobs".',
                                  NEW.job_id);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER steps_job_exists BEFORE INSERT OR UPDATE OF job_id ON job.steps
    FOR EACH ROW EXECUTE FUNCTION job.check_job_exists('steps_job_id_fkey');

CREATE TRIGGER dependencies_job_exists BEFORE INSERT OR UPDATE OF job_id ON job.dependencies
    FOR EACH ROW EXECUTE FUNCTION job.check_job_exists('dependencies_job_id_fkey');

-- Trigger functions: no role calls them (a trigger runs its function whatever the role's
-- EXECUTE), so PUBLIC may not either.
REVOKE ALL ON FUNCTION job.delete_job_rows() FROM PUBLIC;
REVOKE ALL ON FUNCTION job.truncate_job_rows() FROM PUBLIC;
REVOKE ALL ON FUNCTION job.check_job_exists() FROM PUBLIC;
$job_migration_0057$;
        INSERT INTO job.schema_migrations (version, name) VALUES (57, 'set_based_cascades');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 57 AND name = 'set_based_cascades') THEN
        RAISE EXCEPTION 'job migration 57 is recorded in job.schema_migrations as `%`, but this script''s migration 57 is `set_based_cascades`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 57);
    END IF;
END
$apply$;
COMMIT;

-- 0058 ordering_admit_by_index
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 58) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 58 `ordering_admit_by_index` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 58;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 58 `ordering_admit_by_index` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 58 applied now could undo what later migrations changed. Apply what migration 58 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0058$
-- 0058 ordering_admit_by_index: the admission of a keyed job reads its key's unfinished jobs
-- through the key's two partial indexes, not the whole table. Append-only: change the schema
-- in a new numbered file.
--
-- job.ordering_admit (migrations 0012 and 0034), the trigger that makes a keyed job pending
-- when another unfinished job holds its key, asked for jobs of the key in any of five states
-- in one test. No index holds those five: jobs_ordering_head_idx holds the heads (scheduled,
-- available, running, retryable) and jobs_ordering_pending_idx the pending jobs, and the
-- planner cannot split a state list between two partial indexes, so every keyed INSERT (and
-- every job.set_ordering_key, and every redrive of a keyed job) read all of job.jobs, the
-- finished jobs kept for retention included: with 200,000 completed jobs kept, one keyed
-- job.enqueue took 32-37 ms where an unkeyed one takes 1 ms, and job.enqueue_many of 100 keyed
-- jobs 3.2 s; into an empty table a bulk enqueue of keyed jobs grew with the square of its
-- size (16,000 jobs: 18.4 s), holding meanwhile the key locks it had taken, which every other
-- keyed enqueue waits for. Found by a probe of the SQL doors. The test is now two, one per
-- index: an index probe each, whatever the table holds.
--
-- Also: a running job given a key another unfinished job holds (job.set_ordering_key, or a raw
-- UPDATE of ordering_key) was made pending while it held a lease, which the table's
-- jobs_lease_check refused with the whole row in the error's detail, naming neither the job
-- nor the key. It is now refused first, with 55000 (object_not_in_prerequisite_state) naming
-- the job, its state and the key (as job.shown shows a value): a key is given before the job
-- starts. What is refused is unchanged.
--
-- CREATE OR REPLACE keeps the function's owner, its grants (none to PUBLIC) and its triggers.

CREATE OR REPLACE FUNCTION job.ordering_admit() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(job.ordering_lock_key(NEW.ordering_key));
    IF TG_OP = 'INSERT' THEN
        -- The id was drawn before this lock was taken, so a transaction that waited for it
        -- could hold a lower id than the one it waited for. Draw it again: the ids of a key
        -- then follow the order in which their enqueuers took the key's lock, and "enqueue
        -- order" is id order. Rows inserted one after the other in one statement still get
        -- ascending ids (enqueue_many maps ids to inputs by that).
        NEW.id := nextval(pg_get_serial_sequence('job.jobs', 'id'));
    END IF;
    -- Two tests, each read through its partial index (jobs_ordering_head_idx, then
    -- jobs_ordering_pending_idx): one over the five states reads the whole table.
    IF EXISTS (SELECT 1 FROM job.jobs o
               WHERE o.ordering_key = NEW.ordering_key AND o.id <> NEW.id
                 AND o.state IN ('scheduled', 'available', 'running', 'retryable'))
       OR EXISTS (SELECT 1 FROM job.jobs o
                  WHERE o.ordering_key = NEW.ordering_key AND o.id <> NEW.id
                    AND o.state = 'pending')
    THEN
        IF NEW.state = 'running' THEN
            RAISE EXCEPTION 'job % is running, so it cannot wait behind ordering key `%`, which another unfinished job holds: give a job its key before it starts',
                    NEW.id, job.shown(NEW.ordering_key)
                USING ERRCODE = 'object_not_in_prerequisite_state', COLUMN = 'ordering_key';
        END IF;
        NEW.state := 'pending';
        -- Under READ COMMITTED an entry this statement sees stays until after this commit
        -- (the stager deletes entries under the key's lock, which this transaction holds); an
        -- older snapshot may show one deleted since.
        PERFORM job.ordering_wake_later(
            NEW.ordering_key, current_setting('transaction_isolation') <> 'read committed');
    END IF;
    RETURN NEW;
END
$$;
$job_migration_0058$;
        INSERT INTO job.schema_migrations (version, name) VALUES (58, 'ordering_admit_by_index');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 58 AND name = 'ordering_admit_by_index') THEN
        RAISE EXCEPTION 'job migration 58 is recorded in job.schema_migrations as `%`, but this script''s migration 58 is `ordering_admit_by_index`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 58);
    END IF;
END
$apply$;
COMMIT;

-- 0059 door_echoes_shown
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 59) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 59 `door_echoes_shown` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 59;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 59 `door_echoes_shown` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 59 applied now could undo what later migrations changed. Apply what migration 59 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0059$
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
$job_migration_0059$;
        INSERT INTO job.schema_migrations (version, name) VALUES (59, 'door_echoes_shown');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 59 AND name = 'door_echoes_shown') THEN
        RAISE EXCEPTION 'job migration 59 is recorded in job.schema_migrations as `%`, but this script''s migration 59 is `door_echoes_shown`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 59);
    END IF;
END
$apply$;
COMMIT;

-- 0060 claim_items
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 60) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 60 `claim_items` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 60;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 60 `claim_items` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 60 applied now could undo what later migrations changed. Apply what migration 60 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0060$
-- 0060 claim_items: job.claim refuses items of its kind arrays no worker sends, and a worker
-- id its leases cannot carry, naming the argument. Append-only: change the schema in a new
-- numbered file.
--
-- Migration 0055 made job.claim refuse NULL arguments, arrays out of lockstep and leases out
-- of bounds; the items of the other arrays, and the worker's id, were left as the worker sends
-- them. Called by hand or by another client (a probe of the SQL doors):
--
-- * a kind named twice got its own room per item, so a kind capped at 1 running job claimed
--   two, and the second item's lease was replaced by the first's (array_position finds the
--   first);
-- * an `in_worker` over 128 bytes claimed nothing while nothing was due, then failed every
--   claim on jobs_locked_by_check, with the whole row in the error's detail and the whole
--   statement in its context, naming neither the argument nor the worker;
-- * a NULL kind or version, a version below 1 and a negative cap claimed nothing, without a
--   word.
--
-- Each is now refused with 22023 naming the argument, in 0055's words. The worker sends none
-- of them (the builder refuses a kind registered twice, a version below 1, a cap below 1 and
-- an id over 128 bytes). A cap of 0 is still taken (it claims nothing of its kind), as is an
-- empty kind array. The checks are plain PL/pgSQL before the statement, which is unchanged:
-- each reads the arrays the worker sends, one item per kind of the queue.
--
-- As in migration 0055, with those checks before the statement. CREATE OR REPLACE keeps the
-- function's owner and grants and sets its settings anew.

CREATE OR REPLACE FUNCTION job.claim(in_queue text, in_kinds text[], in_versions integer[], in_leases bigint[], in_max integer, in_worker text, in_caps integer[], in_ahead_of text[])
 RETURNS TABLE(id bigint, lock_token uuid, kind text, queue text, priority smallint, payload text, payload_version integer, attempt integer, max_attempts integer, snoozes integer, trace_context text, waited_ms bigint)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
AS $function$
#variable_conflict use_column
BEGIN
    IF in_max IS NULL OR in_max < 0 THEN
        RAISE EXCEPTION 'invalid claim argument `in_max`: must be 0 or more (the most jobs to '
                        'claim), got %', coalesce(in_max::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF in_queue IS NULL OR in_kinds IS NULL OR in_versions IS NULL OR in_leases IS NULL
       OR in_worker IS NULL OR in_caps IS NULL OR in_ahead_of IS NULL THEN
        RAISE EXCEPTION 'invalid claim argument `%`: must not be null',
            CASE WHEN in_queue IS NULL THEN 'in_queue'
                 WHEN in_kinds IS NULL THEN 'in_kinds'
                 WHEN in_versions IS NULL THEN 'in_versions'
                 WHEN in_leases IS NULL THEN 'in_leases'
                 WHEN in_worker IS NULL THEN 'in_worker'
                 WHEN in_caps IS NULL THEN 'in_caps'
                 ELSE 'in_ahead_of' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(in_versions) <> cardinality(in_kinds)
       OR cardinality(in_leases) <> cardinality(in_kinds)
       OR cardinality(in_caps) <> cardinality(in_kinds)
       OR (cardinality(in_kinds) > 0
           AND (array_ndims(in_kinds) <> 1 OR array_lower(in_kinds, 1) <> 1
                OR array_ndims(in_versions) <> 1 OR array_lower(in_versions, 1) <> 1
                OR array_ndims(in_leases) <> 1 OR array_lower(in_leases, 1) <> 1
                OR array_ndims(in_caps) <> 1 OR array_lower(in_caps, 1) <> 1)) THEN
        RAISE EXCEPTION 'invalid claim arguments `in_kinds`, `in_versions`, `in_leases`, '
                        '`in_caps`: must be one-dimensional arrays from 1 of one length (one '
                        'item per kind), got %, %, %, %',
            coalesce(array_dims(in_kinds), 'empty'), coalesce(array_dims(in_versions), 'empty'),
            coalesce(array_dims(in_leases), 'empty'), coalesce(array_dims(in_caps), 'empty')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(in_leases) AS l(ms)
               WHERE l.ms IS NULL OR l.ms < 1 OR l.ms > 3153600000000) THEN
        RAISE EXCEPTION 'invalid claim argument `in_leases`: each lease must be 1 to '
                        '3153600000000 milliseconds (100 years), got %',
            (SELECT coalesce(l.ms::text, 'null') FROM unnest(in_leases) AS l(ms)
             WHERE l.ms IS NULL OR l.ms < 1 OR l.ms > 3153600000000 LIMIT 1)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(in_worker) NOT BETWEEN 1 AND 128 THEN
        RAISE EXCEPTION 'invalid claim argument `in_worker`: must be 1 to 128 bytes (the '
                        'worker''s id, which its leases carry), got %', octet_length(in_worker)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(in_kinds) AS k(kind)
               GROUP BY k.kind HAVING k.kind IS NULL OR count(*) > 1) THEN
        RAISE EXCEPTION 'invalid claim argument `in_kinds`: each kind must be named once and '
                        'not be null (its version, lease and cap are found by its position), '
                        'got %',
            (SELECT CASE WHEN k.kind IS NULL THEN 'null'
                         ELSE format('`%s` %s times', job.shown(k.kind), count(*)) END
             FROM unnest(in_kinds) AS k(kind)
             GROUP BY k.kind HAVING k.kind IS NULL OR count(*) > 1 LIMIT 1)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(in_versions) AS v(version)
               WHERE v.version IS NULL OR v.version < 1) THEN
        RAISE EXCEPTION 'invalid claim argument `in_versions`: each version must be 1 or more '
                        '(the newest payload version the worker decodes), got %',
            (SELECT coalesce(v.version::text, 'null') FROM unnest(in_versions) AS v(version)
             WHERE v.version IS NULL OR v.version < 1 LIMIT 1)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(in_caps) AS c(cap) WHERE c.cap < 0) THEN
        RAISE EXCEPTION 'invalid claim argument `in_caps`: each cap must be null (no limit) or '
                        '0 or more (the most running jobs of its kind), got %',
            (SELECT c.cap FROM unnest(in_caps) AS c(cap) WHERE c.cap < 0 LIMIT 1)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    WITH bound AS MATERIALIZED (
        SELECT coalesce(h.priority, 32767::smallint) AS priority,
               coalesce(h.run_at, 'infinity'::timestamptz) AS run_at,
               coalesce(h.id, 9223372036854775807) AS id
        FROM (SELECT 1) AS one
        LEFT JOIN LATERAL (
            SELECT f.priority, f.run_at, f.id
            FROM unnest($8::text[]) AS r(kind)
            CROSS JOIN LATERAL (
                SELECT j.priority, j.run_at, j.id
                FROM job.jobs j
                WHERE j.queue = $1::text
                  AND j.kind = r.kind
                  AND j.state = 'available'
                ORDER BY j.priority, j.run_at, j.id
                LIMIT 1
            ) f
            ORDER BY 1, 2, 3
            LIMIT 1
        ) h ON true
    ),
    k AS (
        SELECT k.kind, k.version, k.cap
        FROM unnest($2::text[], $3::integer[], $7::integer[]) AS k(kind, version, cap)
        WHERE NOT EXISTS (SELECT 1 FROM job.pauses p
                          WHERE p.scope = 'kind' AND p.name = k.kind
                            AND (p.resume_at IS NULL OR p.resume_at > now()))
          AND NOT EXISTS (SELECT 1 FROM job.pauses p
                          WHERE p.scope = 'queue' AND p.name = $1::text
                            AND (p.resume_at IS NULL OR p.resume_at > now()))
    ),
    -- Running rows of a limited kind are counted through jobs_rescue_idx (locked_until IS NOT
    -- NULL is running, by jobs_lease_check): no extra index on the hot path.
    room AS MATERIALIZED (
        SELECT k.kind, k.version,
               CASE WHEN k.cap IS NULL THEN $5::integer
                    ELSE least($5::integer,
                               k.cap - (SELECT count(*) FROM job.jobs r
                                        WHERE r.locked_until IS NOT NULL AND r.kind = k.kind)::integer)
               END AS room,
               bound.priority AS before_priority, bound.run_at AS before_run_at,
               bound.id AS before_id
        FROM k
        CROSS JOIN bound
    ),
    -- Per kind, the payload versions waiting that this worker decodes (at most room.version),
    -- each found by one probe of jobs_claim_version_idx (a loose index scan), then each
    -- version's jobs read in claim order and the versions' rows merged: the jobs of a newer
    -- version are never read. The probes go from the newest version down: each lands on the
    -- end of its version's range, among the jobs enqueued last, where an ascending probe
    -- would start at the jobs claimed first and step over their index entries until a
    -- VACUUM removes them, as the version's own scan then does once more.
    picked AS (
        SELECT c.tid, c.id, c.priority, c.run_at
        FROM room
        CROSS JOIN LATERAL (
            WITH RECURSIVE versions(version) AS (
                (SELECT j.payload_version
                 FROM job.jobs j
                 WHERE j.queue = $1::text
                   AND j.kind = room.kind
                   AND j.state = 'available'
                   AND j.payload_version <= room.version
                 ORDER BY j.payload_version DESC
                 LIMIT 1)
                UNION ALL
                SELECT (SELECT j.payload_version
                        FROM job.jobs j
                        WHERE j.queue = $1::text
                          AND j.kind = room.kind
                          AND j.state = 'available'
                          AND j.payload_version < v.version
                        ORDER BY j.payload_version DESC
                        LIMIT 1)
                FROM versions v
                WHERE v.version IS NOT NULL
            )
            SELECT f.tid, f.id, f.priority, f.run_at
            FROM versions v
            CROSS JOIN LATERAL (
                SELECT j.ctid AS tid, j.id, j.priority, j.run_at
                FROM job.jobs j
                WHERE j.queue = $1::text
                  AND j.kind = room.kind
                  AND j.state = 'available'
                  AND j.payload_version = v.version
                  AND (j.priority, j.run_at, j.id)
                      < (room.before_priority, room.before_run_at, room.before_id)
                  AND j.run_at <= now()
                  AND (j.deadline IS NULL OR j.deadline > now())
                  AND NOT j.cancel_requested
                  AND j.attempt < 2147483646
                ORDER BY j.priority, j.run_at, j.id
                LIMIT room.room
                FOR NO KEY UPDATE SKIP LOCKED
            ) f
            WHERE v.version IS NOT NULL
            ORDER BY f.priority, f.run_at, f.id
            LIMIT room.room
        ) c
        WHERE room.room > 0
        ORDER BY c.priority, c.run_at, c.id
        LIMIT $5::integer
    ),
    claimed AS (
        UPDATE job.jobs j
        SET state        = 'running',
            attempt      = j.attempt + 1,
            lock_token   = gen_random_uuid(),
            locked_by    = $6::text,
            locked_until = now()
                + ($4::bigint[])[array_position($2::text[], j.kind)] * interval '1 millisecond',
            unique_scope = CASE WHEN j.unique_scope = 'started' THEN 'spent' ELSE j.unique_scope END
        WHERE j.ctid = ANY (ARRAY(SELECT picked.tid FROM picked))
        RETURNING j.id, j.lock_token, j.kind, j.queue, j.priority, j.payload, j.payload_version,
                  j.attempt, j.max_attempts, j.snoozes, j.run_at, j.trace_context
    )
    SELECT id, lock_token, kind, queue, priority, payload::text AS payload, payload_version,
           attempt, max_attempts, snoozes, trace_context,
           greatest(0, extract(epoch FROM now() - run_at) * 1000)::bigint AS waited_ms
    FROM claimed
    ORDER BY priority, run_at, id;
END
$function$;
$job_migration_0060$;
        INSERT INTO job.schema_migrations (version, name) VALUES (60, 'claim_items');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 60 AND name = 'claim_items') THEN
        RAISE EXCEPTION 'job migration 60 is recorded in job.schema_migrations as `%`, but this script''s migration 60 is `claim_items`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 60);
    END IF;
END
$apply$;
COMMIT;

-- 0061 dead_letters_by_id
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 61) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 61 `dead_letters_by_id` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 61;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 61 `dead_letters_by_id` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 61 applied now could undo what later migrations changed. Apply what migration 61 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0061$
-- 0061 dead_letters_by_id: a redrive or a purge reads its dead letters, lowest id first, from
-- an index of the dead letters in id order. Append-only: change the schema in a new numbered
-- file.
--
-- redrive.sql and purge.sql take up to a limit (1,000 by default) of the dead letters matching
-- a filter, lowest id first (dead_letters.sql). jobs_discarded_idx (migration 0002) holds them
-- by (finalized_at, id), not in id order, so a batch either read every dead letter and sorted
-- them, or walked the primary key and read every row before them: finished jobs kept for
-- retention, waiting jobs, all of them. Dead letters are the newest rows after an outage, so
-- the walk read nearly the whole table (20,000 completed rows before 2,000 dead letters: a
-- batch of 100 read 20,100 rows or 2,200; 500,000 completed rows before 5,000 dead letters: a
-- batch of 1,000 spent 100 ms finding them), and every batch of a redrive did it again (what a
-- batch redrives is no longer discarded, and the next batch starts from the lowest id).
-- A listing of the dead letters (`job dead-letters`, `job list --state discarded`, the
-- dashboard's page) reads them in id order too.
--
-- A partial index in id order of the discarded rows only: an ordered scan of it reads the dead
-- letters a batch takes, whatever else the table holds. Rows enter it when they are discarded
-- and leave it when redriven or purged: a claim or a completion writes no entry to it. Built in
-- this migration's transaction (CREATE INDEX CONCURRENTLY cannot run in one): it reads the
-- table once and holds off writes to job.jobs meanwhile; on a large table, apply it when writes
-- can wait that long.

CREATE INDEX jobs_dead_letters_idx ON job.jobs (id) WHERE state = 'discarded';
$job_migration_0061$;
        INSERT INTO job.schema_migrations (version, name) VALUES (61, 'dead_letters_by_id');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 61 AND name = 'dead_letters_by_id') THEN
        RAISE EXCEPTION 'job migration 61 is recorded in job.schema_migrations as `%`, but this script''s migration 61 is `dead_letters_by_id`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 61);
    END IF;
END
$apply$;
COMMIT;

-- 0062 step_totals
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 62) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 62 `step_totals` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 62;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 62 `step_totals` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 62 applied now could undo what later migrations changed. Apply what migration 62 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0062$
-- 0062 step_totals: a job's step count and output bytes are kept in a row of their own, so a
-- step's save reads them, not every step the job has. Append-only: change the schema in a new
-- numbered file.
--
-- step_save.sql records a new step only while the job has fewer than job_core::MAX_STEPS
-- (10,000) steps and its outputs, with the new one, add up to at most MAX_STEPS_TOTAL bytes.
-- It counted the job's steps and summed their sizes on every save: each save read every step
-- before it, and a job that reached 10,000 steps had read about 50 million rows in all; with
-- 9,998 steps recorded, one save took 4.6 ms where the first takes 0.15 ms. A worker's step
-- saves share one connection, one at a time, so one such job slowed the steps of every other
-- job on the worker.
--
-- job.step_totals holds, per job with steps, how many it has and their bytes: output_bytes
-- (migration 0049), or for a row without it (a worker of an earlier release, an operator's
-- SQL) the length of its JSON text, which the triggers can measure alike on the way in and on
-- the way out. step_save.sql counted such a row's stored size, which the INSERT trigger's
-- transition table cannot give (it holds the value before PostgreSQL compresses it: a
-- 40,012-byte output stored in 486 bytes was added as 40,012 and taken away as 486).
-- Statement-level triggers on job.steps keep it, whoever writes the steps (a worker of an
-- earlier release, an operator's SQL): one statement per INSERT (a save inserts one step; a
-- bulk insert of many steps of one job adds them at once, where a trigger per row would
-- rewrite the job's row once per step), per DELETE (a prune or purge deletes the steps of many
-- jobs at once: migration 0057) and per UPDATE, and a TRUNCATE empties it. A job's row goes
-- when its last step does. The functions are SECURITY DEFINER, as migration 0057's are: a role
-- that may write steps need not be granted the totals.
--
-- A worker reads it and locks its job's row (step_save.sql runs as the worker's role, and a
-- locking read asks for UPDATE): SELECT and UPDATE are granted here, as migration 0032 grants
-- the worker's block, to every role that holds the worker's privileges (UPDATE on job.jobs;
-- not the owner, PUBLIC or superusers), and the README's grants name it.
-- Filled here from the steps already recorded, under a lock that holds off writes to
-- job.steps until this migration commits (step saves wait that long).

LOCK TABLE job.steps IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE job.step_totals (
    job_id bigint NOT NULL PRIMARY KEY,
    steps  integer NOT NULL,
    bytes  bigint NOT NULL
);

INSERT INTO job.step_totals (job_id, steps, bytes)
SELECT s.job_id, count(*), sum(coalesce(s.output_bytes, octet_length(s.output::text)))
FROM job.steps s
GROUP BY s.job_id;

-- The steps a statement inserted, per job: added to the totals.
CREATE FUNCTION job.count_steps_added() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO job.step_totals AS t (job_id, steps, bytes)
    SELECT a.job_id, count(*), sum(coalesce(a.output_bytes, octet_length(a.output::text)))
    FROM added a
    GROUP BY a.job_id
    ON CONFLICT (job_id) DO UPDATE
    SET steps = t.steps + excluded.steps,
        bytes = t.bytes + excluded.bytes;
    RETURN NULL;
END
$$;

CREATE TRIGGER steps_count_insert AFTER INSERT ON job.steps
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION job.count_steps_added();

-- The steps a statement deleted, per job: taken from the totals, a job's row gone with its
-- last step.
CREATE FUNCTION job.uncount_steps() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- A job whose steps all went (a prune, a purge) loses its row at once; the others are
    -- updated. Disjoint rows, so two data-modifying parts of one statement may.
    WITH g AS (
        SELECT o.job_id, count(*) AS steps,
               sum(coalesce(o.output_bytes, octet_length(o.output::text))) AS bytes
        FROM gone o
        GROUP BY o.job_id
    ),
    emptied AS (
        DELETE FROM job.step_totals t
        USING g
        WHERE t.job_id = g.job_id AND t.steps <= g.steps
    )
    UPDATE job.step_totals t
    SET steps = t.steps - g.steps,
        bytes = t.bytes - g.bytes
    FROM g
    WHERE t.job_id = g.job_id AND t.steps > g.steps;
    RETURN NULL;
END
$$;

CREATE TRIGGER steps_uncount AFTER DELETE ON job.steps
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION job.uncount_steps();

-- The steps a statement updated (no writer of the framework does; an operator's SQL may move a
-- step to another job, or change its output): their old values taken from their old jobs'
-- totals, their new ones added to their new jobs'. A trigger with transition tables takes no
-- column list, so every UPDATE of job.steps runs it.
CREATE FUNCTION job.recount_steps() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    WITH g AS (
        SELECT o.job_id, count(*) AS steps,
               sum(coalesce(o.output_bytes, octet_length(o.output::text))) AS bytes
        FROM gone o
        GROUP BY o.job_id
    )
    UPDATE job.step_totals t
    SET steps = t.steps - g.steps,
        bytes = t.bytes - g.bytes
    FROM g
    WHERE t.job_id = g.job_id;
    INSERT INTO job.step_totals AS t (job_id, steps, bytes)
    SELECT a.job_id, count(*), sum(coalesce(a.output_bytes, octet_length(a.output::text)))
    FROM added a
    GROUP BY a.job_id
    ON CONFLICT (job_id) DO UPDATE
    SET steps = t.steps + excluded.steps,
        bytes = t.bytes + excluded.bytes;
    DELETE FROM job.step_totals t
    WHERE t.job_id = ANY (ARRAY(SELECT DISTINCT o.job_id FROM gone o)) AND t.steps <= 0;
    RETURN NULL;
END
$$;

CREATE TRIGGER steps_recount AFTER UPDATE ON job.steps
    REFERENCING OLD TABLE AS gone NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION job.recount_steps();

CREATE FUNCTION job.truncate_step_totals() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    TRUNCATE job.step_totals;
    RETURN NULL;
END
$$;

CREATE TRIGGER steps_truncate_totals AFTER TRUNCATE ON job.steps
    FOR EACH STATEMENT EXECUTE FUNCTION job.truncate_step_totals();

-- Trigger functions: no role calls them (a trigger runs its function whatever the role's
-- EXECUTE), so PUBLIC may not either.
REVOKE ALL ON FUNCTION job.count_steps_added() FROM PUBLIC;
REVOKE ALL ON FUNCTION job.uncount_steps() FROM PUBLIC;
REVOKE ALL ON FUNCTION job.recount_steps() FROM PUBLIC;
REVOKE ALL ON FUNCTION job.truncate_step_totals() FROM PUBLIC;

DO $grants$
DECLARE
    worker text;
BEGIN
    FOR worker IN
        SELECT DISTINCT a.grantee::pg_catalog.regrole::text
        FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a, pg_catalog.pg_roles r
        WHERE c.oid = 'job.jobs'::pg_catalog.regclass
          AND a.privilege_type = 'UPDATE'
          AND a.grantee <> c.relowner
          AND r.oid = a.grantee
          AND NOT r.rolsuper
    LOOP
        EXECUTE pg_catalog.format('GRANT SELECT, UPDATE ON job.step_totals TO %s', worker);
    END LOOP;
END
$grants$;
$job_migration_0062$;
        INSERT INTO job.schema_migrations (version, name) VALUES (62, 'step_totals');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 62 AND name = 'step_totals') THEN
        RAISE EXCEPTION 'job migration 62 is recorded in job.schema_migrations as `%`, but this script''s migration 62 is `step_totals`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 62);
    END IF;
END
$apply$;
COMMIT;

-- 0063 paths_pinned
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 63) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 63 `paths_pinned` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 63;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 63 `paths_pinned` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 63 applied now could undo what later migrations changed. Apply what migration 63 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0063$
-- 0063 paths_pinned: the last two PL/pgSQL functions that ran with their caller's search_path
-- pin it, and job.shown, which echoes values in errors, hides the invisible characters that
-- reorder or hide text as it hides control characters. Append-only: change the schema in a new
-- numbered file.
--
-- job.notify_insert (migration 0001, the statement trigger of every INSERT into job.jobs) and
-- job.enqueue_unique (migration 0020, the worker's keyed enqueue, last replaced by 0059) run
-- with their caller's rights and, until now, their caller's search_path. Both compare
-- job.job_state values, and PostgreSQL takes an operator of the exact types, wherever on the
-- path it is, over pg_catalog's operator of any enum: a role able to create objects in a
-- schema on another role's path (`public` in a database created before PostgreSQL 15, whose
-- PUBLIC may create there; an application's own schema) could define `=` on
-- (job.job_state, job.job_state) and have it run as whoever inserted a job. A probe did so as
-- an enqueue-only role and read every payload as the worker; as the owner it would have run
-- as the owner. The same operator broke every keyed enqueue (ON CONFLICT found no index whose
-- predicate matched). Pinned to pg_catalog, pg_temp, as every SECURITY DEFINER function of the
-- schema and job.claim already are: both bodies name the schema's objects in full. The
-- functions left unpinned are the SQL helpers of the naming rules (migrations 0005 and 0022),
-- which the planner inlines only without a SET clause and which compare built-in types only,
-- whose exact operators pg_catalog, searched first, always has (tests/doors/roles.rs holds them
-- to that).
--
-- job.shown (migration 0042) shows at most 40 characters of a refused value with control
-- characters as `?`. Format characters passed: a right-to-left override (U+202E), a line
-- separator (U+2028), a zero-width space, a soft hyphen, which in an operator's terminal or log
-- viewer reorder, break or hide the text around them (a producer's unique key could make a
-- logged refusal read as another). They are now `?` too: the characters job.forbidden_in_names
-- refuses in names, but the spaces, which show as spaces.

ALTER FUNCTION job.notify_insert() SET search_path = pg_catalog, pg_temp;

ALTER FUNCTION job.enqueue_unique(text, text, smallint, jsonb, integer, integer, timestamptz,
                                  timestamptz, text, text, boolean, text[], text)
    SET search_path = pg_catalog, pg_temp;

-- As in migration 0042, with the wider class. CREATE OR REPLACE keeps its owner and grants.
CREATE OR REPLACE FUNCTION job.shown(value text) RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT regexp_replace(left(value, 40),
                          '[[:cntrl:]\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd'
                          '\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e'
                          '\u2060-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd'
                          '\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a'
                          '\U000e0001\U000e0020-\U000e007f]',
                          '?', 'g')
           || CASE WHEN length(value) > 40
                   THEN format('… (%s bytes)', octet_length(value)) ELSE '' END
$$;
$job_migration_0063$;
        INSERT INTO job.schema_migrations (version, name) VALUES (63, 'paths_pinned');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 63 AND name = 'paths_pinned') THEN
        RAISE EXCEPTION 'job migration 63 is recorded in job.schema_migrations as `%`, but this script''s migration 63 is `paths_pinned`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 63);
    END IF;
END
$apply$;
COMMIT;

-- 0064 claim_never_seq_scans
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 64) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 64 `claim_never_seq_scans` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 64;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 64 `claim_never_seq_scans` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 64 applied now could undo what later migrations changed. Apply what migration 64 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0064$
-- 0064 claim_never_seq_scans: job.claim never reads job.jobs by a sequential scan, whatever
-- the table's statistics said when the function planned its statement. Append-only: change
-- the schema in a new numbered file.
--
-- job.claim plans its statement once per connection (`plan_cache_mode =
-- force_generic_plan`, migration 0021) and keeps that plan until the table's statistics
-- change. A worker that starts on an empty job.jobs plans it from an empty table's costs, and
-- the cheapest way to reach the rows it picked, by the plan's reckoning, is then to read the
-- whole table (`Seq Scan on jobs ... Filter: (ctid = ANY (...))`) rather than each row by its
-- ctid. The plan stays after the table has grown, until the next ANALYZE: in a soak of 16,000
-- jobs a second started on an empty table, each claim of 200 read every row (97,000 to
-- 307,000 of them) and took 300 to 875 ms, and the worker finished 3,243 jobs a second in its
-- first 15 s, until the pruner's first VACUUM (ANALYZE) ten seconds in (tables autovacuum
-- vacuums wait for their first doubling, see vacuum_needed.sql, or autovacuum's own ANALYZE).
--
-- Every scan of job.jobs in the statement has an index or ctid path (the bound's and the
-- versions' probes, each version's scan, the running count of a limited kind, the UPDATE by
-- ctid), and job.pauses its primary key: with sequential scans off for the function, the plan
-- made on an empty table is the one made on a large one. The setting is the function's own,
-- not its caller's.

ALTER FUNCTION job.claim(text, text[], integer[], bigint[], integer, text, integer[], text[])
    SET enable_seqscan = off;
$job_migration_0064$;
        INSERT INTO job.schema_migrations (version, name) VALUES (64, 'claim_never_seq_scans');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 64 AND name = 'claim_never_seq_scans') THEN
        RAISE EXCEPTION 'job migration 64 is recorded in job.schema_migrations as `%`, but this script''s migration 64 is `claim_never_seq_scans`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 64);
    END IF;
END
$apply$;
COMMIT;

-- 0065 pause_names
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 65) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 65 `pause_names` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 65;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 65 `pause_names` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 65 applied now could undo what later migrations changed. Apply what migration 65 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0065$
-- 0065 pause_names: job.pauses takes only the names a queue or kind can have, from any
-- writer. Append-only: change the schema in a new numbered file.
--
-- The Rust side (`Pause::check`), the CLI and the dashboard refuse to pause a name no queue or
-- kind can have (job.name_problem), and the breaker writes only kinds job.breaker_record
-- checked. But an operator with INSERT on job.pauses (the README's operator grants) could
-- write any name of 1 to 128 bytes by hand: `INSERT INTO job.pauses (scope, name) VALUES
-- ('queue', 'emails ')` paused nothing (no job's queue has a trailing space), was listed by
-- `job pauses` and the dashboard as in force, and could not be resumed by either, which
-- refused the name. A trigger now refuses such a name with the doors' words (as
-- compensations_names does for job.compensations, migration 0025): SECURITY DEFINER, so the
-- writer needs no EXECUTE on job.name_problem, and the quick test inline, so a good name costs
-- no call. Rows written before this migration are left as they are: `Admin::resume` deletes
-- a stored pause whatever its name (job-postgres/src/admin.rs).
--
-- And job.dependencies_exist, given a NULL among its ids, said "names job <NULL>, which does
-- not exist"; it now says the id is null.

CREATE FUNCTION job.check_pause() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    problem text := job.name_problem(NEW.name);
BEGIN
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pause refused: the % name %', NEW.scope, problem
            USING ERRCODE = 'check_violation', COLUMN = 'name', TABLE = 'pauses',
                  SCHEMA = 'job', CONSTRAINT = 'pauses_names';
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION job.check_pause() FROM PUBLIC;

DO $names$
BEGIN
    EXECUTE format(
        'CREATE TRIGGER pauses_names '
        'BEFORE INSERT OR UPDATE OF name ON job.pauses FOR EACH ROW '
        'WHEN ((octet_length(NEW.name) BETWEEN 1 AND 128 AND NEW.name !~ %L) IS NOT TRUE) '
        'EXECUTE FUNCTION job.check_pause()',
        job.forbidden_in_names());
END
$names$;

CREATE OR REPLACE FUNCTION job.dependencies_exist(ids bigint[]) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    missing bigint;
BEGIN
    IF array_position(ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'job row refused: `depends_on` holds a null job id'
            USING ERRCODE = 'check_violation', COLUMN = 'depends_on', TABLE = 'jobs',
                  SCHEMA = 'job';
    END IF;
    PERFORM 1 FROM job.jobs j WHERE j.id = ANY (ids) ORDER BY j.id FOR KEY SHARE OF j;
    SELECT i INTO missing
    FROM unnest(ids) AS i
    WHERE NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.id = i)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job row refused: `depends_on` names job %, which does not exist', missing
            USING ERRCODE = 'check_violation', COLUMN = 'depends_on', TABLE = 'jobs',
                  SCHEMA = 'job';
    END IF;
    RETURN true;
END
$$;
$job_migration_0065$;
        INSERT INTO job.schema_migrations (version, name) VALUES (65, 'pause_names');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 65 AND name = 'pause_names') THEN
        RAISE EXCEPTION 'job migration 65 is recorded in job.schema_migrations as `%`, but this script''s migration 65 is `pause_names`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 65);
    END IF;
END
$apply$;
COMMIT;

-- 0066 passes_never_seq_scan
BEGIN;
DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0)); END $lock$;
DO $apply$
DECLARE
    missing integer;
    later integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = 66) THEN
        SELECT min(v) INTO missing FROM pg_catalog.unnest('{1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65}'::integer[]) v
            WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 66 `passes_never_seq_scan` was not applied: migration %, which comes before it, is not recorded in job.schema_migrations (migrations apply in order, each after the one before)', missing;
        END IF;
        SELECT min(version) INTO later FROM job.schema_migrations WHERE version > 66;
        IF later IS NOT NULL THEN
            RAISE EXCEPTION 'job migration 66 `passes_never_seq_scan` was not applied: it is not recorded in job.schema_migrations, but migration %, which comes after it, is: the schema was migrated out of order, and 66 applied now could undo what later migrations changed. Apply what migration 66 lacks by hand and record it, or restore the database from a backup', later;
        END IF;
EXECUTE $job_migration_0066$
-- 0066 passes_never_seq_scan: the rescuer's function and the dependency pass that every
-- stager pass runs read job.jobs by its indexes, whatever the table's statistics said when a
-- session planned them. Append-only: change the schema in a new numbered file.
--
-- A PL/pgSQL function plans each of its statements once per session and, from the sixth run
-- on, may keep a generic plan until the table's statistics change, as job.claim did before
-- migration 0064. Planned while job.jobs was empty (a worker started on a new database, or
-- after a VACUUM truncated a drained table), the plans stayed after the table grew, until the
-- pruner's next ANALYZE: with 80,000 rows added after eight passes on the empty table,
-- job.rescue_expired read the whole table by a sequential scan to rescue nothing, and
-- job.dependencies_resolve, which sql/stage.sql runs at every poll of every worker, read it
-- four times (320,000 rows) to resolve nothing. With sequential scans off for the two
-- functions, both read none of it (every scan of job.jobs in them has a primary key or
-- partial index path). A scan with no other path is still made, by the same sequential scan:
-- the setting only makes the planner prefer the others. The statements the store sends for
-- the heartbeat, the stager, the expirer and the progress it saves are planned at each run
-- instead (job-postgres/src/lease.rs, PLANNED_EACH_TIME); tests/store_claim.rs counts the
-- rows each reads.

ALTER FUNCTION job.rescue_expired(integer) SET enable_seqscan = off;
ALTER FUNCTION job.dependencies_resolve(integer) SET enable_seqscan = off;
$job_migration_0066$;
        INSERT INTO job.schema_migrations (version, name) VALUES (66, 'passes_never_seq_scan');
    ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations
                      WHERE version = 66 AND name = 'passes_never_seq_scan') THEN
        RAISE EXCEPTION 'job migration 66 is recorded in job.schema_migrations as `%`, but this script''s migration 66 is `passes_never_seq_scan`: the database was migrated by a build whose migrations differ from this one''s', (SELECT name FROM job.schema_migrations WHERE version = 66);
    END IF;
END
$apply$;
COMMIT;
