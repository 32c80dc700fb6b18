-- 0006 validate rules: checks every stored row against the time constraints that 0005 added
-- NOT VALID (after clamping the rows that broke them). In a transaction of its own, VALIDATE
-- takes only a SHARE UPDATE EXCLUSIVE lock: workers and producers go on writing while the
-- table is scanned. Append-only: change the schema in a new numbered file.

ALTER TABLE job.jobs VALIDATE CONSTRAINT jobs_run_at_check;
ALTER TABLE job.jobs VALIDATE CONSTRAINT jobs_deadline_check;
ALTER TABLE job.jobs VALIDATE CONSTRAINT jobs_created_at_check;
ALTER TABLE job.jobs VALIDATE CONSTRAINT jobs_finalized_at_check;
ALTER TABLE job.jobs VALIDATE CONSTRAINT jobs_locked_until_check;
