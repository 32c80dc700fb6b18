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
