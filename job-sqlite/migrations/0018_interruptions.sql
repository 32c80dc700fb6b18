-- 0018 interruptions: how many interrupted executions of a job were given back uncounted,
-- as PostgreSQL's migration 0045 describes: sql/release.sql gives back an execution that ran
-- only while it is below MAX_REFUNDED_INTERRUPTIONS (10), and adds one; a redrive sets it back
-- to 0. Rows stored before start at 0.
-- Append-only: change the schema in a new numbered file.

ALTER TABLE job_jobs ADD COLUMN interruptions INTEGER NOT NULL DEFAULT 0
    CHECK (interruptions >= 0);
