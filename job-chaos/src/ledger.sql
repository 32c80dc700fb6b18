-- The chaos ledger: one row per execution of a `chaos.work` handler, written by the handler
-- itself outside any lease guard, so it shows what really ran, not what the job row says.
--   started_at  first statement of the handler (database clock)
--   lease_live  at that moment the job row was running under this execution's token and
--               its lease had not expired
--   finished_at last statement of the handler (database clock), with outcome 'ok' / 'error'
--   aborted_at  the handler was dropped before finishing (lease lost, fenced, shutdown);
--               the worker's clock at the drop, written after it (and printed at once, as
--               the write may not make it: see ABORTED_LINE)
-- A SIGKILLed worker writes neither finished_at nor aborted_at for what it was running.
-- A worker paused (SIGSTOP) past its lease may write finished_at after its lease was taken
-- over: code in a stopped process is the one thing nothing can stop; its effect cannot commit.
CREATE SCHEMA chaos;

CREATE TABLE chaos.executions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      bigint      NOT NULL,
    attempt     integer     NOT NULL,
    worker      text        NOT NULL,
    lock_token  uuid        NOT NULL,
    lease_live  boolean     NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    outcome     text CHECK (outcome IN ('ok', 'error')),
    aborted_at  timestamptz
);

-- The effects: one row per successful attempt whose transaction also completed the job
-- (complete_in), so a job has exactly one effect if it completed, none if it was discarded.
CREATE TABLE chaos.effects (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id     bigint      NOT NULL,
    attempt    integer     NOT NULL,
    worker     text        NOT NULL,
    lock_token uuid        NOT NULL,
    at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
