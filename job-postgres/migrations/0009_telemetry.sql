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
