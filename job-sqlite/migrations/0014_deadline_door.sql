-- 0014 deadline_door: a job whose deadline is not after both its run time and now is refused
-- at every door that inserts a job, as job-postgres's migration 0033 refuses it. The claim
-- takes a job only from its run time and before its deadline, so such a job could never
-- start: it waited to be ended by the expirer, and the enqueue had answered with its id.
-- Only an INSERT (rows stored before, and a retry whose backoff runs past the deadline, are
-- the expirer's); an upsert replacing a waiting duplicate is checked on its proposed row.
-- Times are INTEGER microseconds since the Unix epoch; now is the database's clock, as the
-- store reads it. Append-only: change the schema in a new numbered file.

CREATE TRIGGER job_jobs_deadline_door
BEFORE INSERT ON job_jobs
FOR EACH ROW
WHEN NEW.deadline IS NOT NULL
 AND NEW.deadline <= max(NEW.run_at, CAST(unixepoch('subsec') * 1000000 AS INTEGER))
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `deadline` is not after the run time and now: the job could never start, only expire');
END;
