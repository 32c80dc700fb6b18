-- 0045 interruptions: how many interrupted executions of a job were given back uncounted.
-- Append-only: change the schema in a new numbered file.
--
-- An execution the worker stops without an outcome (a shutdown's drain deadline, or a fence
-- when its lease could not be renewed: the database down or restarting) is given back with its
-- attempt not counted (sql/release.sql). That refund had no bound: a job whose work takes its
-- database down (the restart fences it) ran for ever. release.sql now gives back an execution
-- that ran only while this count is below MAX_REFUNDED_INTERRUPTIONS (10), and adds one; past
-- it, the lease runs out and the rescuer counts the attempt. A redrive sets it back to 0, with
-- the attempts. Rows stored before start at 0 (a count read from their histories would be
-- cut by the history's bound of 20 entries).
--
-- The constant default adds the column without rewriting the table; the CHECK is validated
-- apart (a scan of the table, holding only a lock that lets reads and writes go on).

ALTER TABLE job.jobs ADD COLUMN interruptions integer NOT NULL DEFAULT 0;
ALTER TABLE job.jobs ADD CONSTRAINT jobs_interruptions_check
    CHECK (interruptions >= 0) NOT VALID;
ALTER TABLE job.jobs VALIDATE CONSTRAINT jobs_interruptions_check;
