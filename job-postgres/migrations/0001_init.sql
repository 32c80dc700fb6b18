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
