-- 0002 results: what a completed attempt returned (`JobContext::set_result`, or a `#[job]`
-- function's `Ok` value), as JSON text; written only by the finalize or complete_in that
-- completes the job, null otherwise. The worker refuses a result over 64 KiB of compact JSON
-- (MAX_RESULT in job-core); the CHECK bounds what any writer stores.
-- Append-only: change the schema in a new numbered file.

ALTER TABLE job_jobs ADD COLUMN result TEXT
    CHECK (result IS NULL OR (json_valid(result) AND length(CAST(result AS BLOB)) <= 131072));
