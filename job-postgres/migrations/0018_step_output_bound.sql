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
