-- 0033 deadline_door: a job whose deadline is not after both its run time and now is refused
-- at every door that inserts a job. Append-only: change the schema in a new numbered file.
--
-- The claim takes a job only from its run time and before its deadline, so such a job could
-- never start: it waited to be ended by the expirer (a dead letter of class `expired`, firing
-- its compensation), and the enqueue had answered with its id. The Rust door refused it only
-- when it could compare the two itself (two instants, or two delays); `job.enqueue`,
-- `job.enqueue_many`, a raw INSERT and the Rust door's mixed forms (`run_at` an instant and
-- `deadline_in` a delay, or the other way round, the CLI's `--run-at` with `--deadline-in`)
-- stored it. Refused here with ``job row refused: `deadline` ...`` (SQLSTATE 23514, COLUMN
-- `deadline`: `EnqueueError::InvalidOption` `deadline` through the store). Only an INSERT:
-- rows stored before, and a retry whose backoff runs past the deadline, are the expirer's, as
-- they were. An upsert that replaces a waiting duplicate (`replace_duplicate`) is checked on
-- its proposed row, before the conflict is found.
CREATE FUNCTION job.refuse_deadline() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'job row refused: `deadline` % is not after the run time % and now %: the '
                    'job could never start, only expire',
            NEW.deadline, NEW.run_at, now()
        USING ERRCODE = 'check_violation', COLUMN = 'deadline', TABLE = 'jobs', SCHEMA = 'job',
              CONSTRAINT = TG_NAME;
END
$$;

CREATE TRIGGER jobs_deadline_door
    BEFORE INSERT ON job.jobs
    FOR EACH ROW
    WHEN (NEW.deadline IS NOT NULL AND NEW.deadline <= greatest(NEW.run_at, now()))
    EXECUTE FUNCTION job.refuse_deadline();
