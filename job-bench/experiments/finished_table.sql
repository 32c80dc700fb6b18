-- Setup of finalize_move.sql (`--raw-setup-sql`): a table of finished jobs beside job.jobs,
-- keyed by id and nothing else.
CREATE SCHEMA IF NOT EXISTS bench_experiment;
CREATE TABLE IF NOT EXISTS bench_experiment.finished (
    id           bigint PRIMARY KEY,
    kind         text        NOT NULL,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    attempt      integer     NOT NULL,
    result       jsonb,
    created_at   timestamptz NOT NULL,
    finalized_at timestamptz NOT NULL
);
