-- 0021 step totals: a job's step count and output bytes are kept in a row of their own, so a
-- step's save reads them, not every step the job has (job-postgres migration 0062). Append-only:
-- change the schema in a new numbered file.
--
-- A new step is recorded only while the job has fewer than job_core::MAX_STEPS (10,000) steps
-- and its outputs, with the new one, add up to at most MAX_STEPS_TOTAL bytes. sql/step_room.sql
-- counted the job's steps and summed their sizes on every save, inside the save's immediate
-- transaction: each save read every step before it, and held the file's one write lock (every
-- claim, outcome and enqueue of the process waits for it) meanwhile, about 2 ms at 10,000
-- steps.
--
-- job_step_totals holds, per job with steps, how many it has and the bytes of their outputs
-- (octet_length, as step_room.sql summed them). Triggers on job_steps keep it for every
-- writer, a job's deletion included (the foreign key's cascade runs the DELETE trigger), and a
-- job's row goes with its last step. Filled here from the steps already recorded.

CREATE TABLE job_step_totals (
    job_id INTEGER NOT NULL PRIMARY KEY,
    steps  INTEGER NOT NULL,
    bytes  INTEGER NOT NULL
) STRICT;

INSERT INTO job_step_totals (job_id, steps, bytes)
SELECT job_id, count(*), sum(octet_length(output))
FROM job_steps
GROUP BY job_id;

CREATE TRIGGER job_steps_count_insert
AFTER INSERT ON job_steps
FOR EACH ROW
BEGIN
    INSERT INTO job_step_totals (job_id, steps, bytes)
    VALUES (NEW.job_id, 1, octet_length(NEW.output))
    ON CONFLICT (job_id) DO UPDATE
    SET steps = steps + 1,
        bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER job_steps_count_delete
AFTER DELETE ON job_steps
FOR EACH ROW
BEGIN
    UPDATE job_step_totals
    SET steps = steps - 1,
        bytes = bytes - octet_length(OLD.output)
    WHERE job_id = OLD.job_id;
    DELETE FROM job_step_totals WHERE job_id = OLD.job_id AND steps <= 0;
END;

CREATE TRIGGER job_steps_count_update
AFTER UPDATE OF job_id, output ON job_steps
FOR EACH ROW
BEGIN
    UPDATE job_step_totals
    SET steps = steps - 1,
        bytes = bytes - octet_length(OLD.output)
    WHERE job_id = OLD.job_id;
    DELETE FROM job_step_totals WHERE job_id = OLD.job_id AND steps <= 0;
    INSERT INTO job_step_totals (job_id, steps, bytes)
    VALUES (NEW.job_id, 1, octet_length(NEW.output))
    ON CONFLICT (job_id) DO UPDATE
    SET steps = steps + 1,
        bytes = bytes + excluded.bytes;
END;
