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
