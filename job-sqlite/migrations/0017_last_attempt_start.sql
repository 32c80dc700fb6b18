-- 0017 last attempt start: a last attempt is counted by the rescuer only once its handler
-- started, as PostgreSQL's migration 0044 describes. The worker records the start of a last
-- attempt (sql/record_start.sql: started_lease := the lease's token, guarded by it) before
-- its handler runs; an expired last attempt whose start was not recorded under its lease goes
-- back to `retryable`, the attempt not counted (sql/rescue.sql). Never cleared: a new claim's
-- token differs from it.
-- Append-only: change the schema in a new numbered file.

ALTER TABLE job_jobs ADD COLUMN started_lease BLOB;
