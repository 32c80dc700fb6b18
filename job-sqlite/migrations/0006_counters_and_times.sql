-- 0006 counters and times: what only a raw write can set, bounded as job-postgres's migration
-- 0022 bounds it, by triggers (SQLite adds no CHECK to a table it has), so that no row a raw
-- write makes stops the store. Before: a row at `attempt` 2147483647 (or `max_attempts` or
-- `snoozes` past it) made every claim of its queue fail ("out of range integral type
-- conversion" reading it into the worker's i32), and a `run_at` far outside what a time holds
-- made the claim overflow computing how long the job had waited. Each refusal names the
-- column: ``job row refused: `attempt` ...``.
--
-- `attempt` and `snoozes` stay below 2147483647 so that the claim's and the snooze's + 1 fits
-- (the claim leaves a row at 2147483646 waiting, the snooze count stops there); a running row
-- has `attempt` 1 or more, so that a release or snooze can take 1 away. The times every reader
-- decodes are from 0001-01-01 to 9999-12-31 UTC. `locked_by` is a worker's id, at most 128
-- bytes (the rescuer copies it into the error history). Rows already stored keep what they
-- have: an UPDATE checks only the columns it changes (a claim or finalize of an old row with
-- an odd time still works), and the claim passes over a waiting row it could not read back. Append-only: change the schema in a new numbered file.

CREATE TRIGGER job_jobs_bounds_insert
BEFORE INSERT ON job_jobs
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `attempt` must be 0 to 2147483646, and 1 or more while running')
    WHERE NEW.attempt NOT BETWEEN 0 AND 2147483646 OR (NEW.state = 'running' AND NEW.attempt < 1);
    SELECT RAISE(ABORT, 'job row refused: `snoozes` must be 0 to 2147483646')
    WHERE NEW.snoozes NOT BETWEEN 0 AND 2147483646;
    SELECT RAISE(ABORT, 'job row refused: `max_attempts` must be 1 to 2147483647')
    WHERE NEW.max_attempts NOT BETWEEN 1 AND 2147483647;
    SELECT RAISE(ABORT, 'job row refused: `payload_version` must be 1 to 2147483647')
    WHERE NEW.payload_version NOT BETWEEN 1 AND 2147483647;
    SELECT RAISE(ABORT, 'job row refused: `run_at` must be from 0001-01-01 to 9999-12-31 UTC (microseconds since the Unix epoch)')
    WHERE NEW.run_at NOT BETWEEN -62135596800000000 AND 253402300799999999;
    SELECT RAISE(ABORT, 'job row refused: `deadline` must be from 0001-01-01 to 9999-12-31 UTC (microseconds since the Unix epoch)')
    WHERE NEW.deadline NOT BETWEEN -62135596800000000 AND 253402300799999999;
    SELECT RAISE(ABORT, 'job row refused: `created_at` must be from 0001-01-01 to 9999-12-31 UTC (microseconds since the Unix epoch)')
    WHERE NEW.created_at NOT BETWEEN -62135596800000000 AND 253402300799999999;
    SELECT RAISE(ABORT, 'job row refused: `finalized_at` must be from 0001-01-01 to 9999-12-31 UTC (microseconds since the Unix epoch)')
    WHERE NEW.finalized_at NOT BETWEEN -62135596800000000 AND 253402300799999999;
    SELECT RAISE(ABORT, 'job row refused: `locked_until` must be from 0001-01-01 to 9999-12-31 UTC (microseconds since the Unix epoch)')
    WHERE NEW.locked_until NOT BETWEEN -62135596800000000 AND 253402300799999999;
    SELECT RAISE(ABORT, 'job row refused: `stuck_since` must be from 0001-01-01 to 9999-12-31 UTC (microseconds since the Unix epoch)')
    WHERE NEW.stuck_since NOT BETWEEN -62135596800000000 AND 253402300799999999;
    SELECT RAISE(ABORT, 'job row refused: `locked_by` must be at most 128 bytes')
    WHERE length(CAST(NEW.locked_by AS BLOB)) > 128;
END;

CREATE TRIGGER job_jobs_bounds_update
BEFORE UPDATE OF attempt, snoozes, max_attempts, payload_version, run_at, deadline, created_at,
    finalized_at, locked_until, stuck_since, locked_by, state
ON job_jobs
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `attempt` must be 0 to 2147483646, and 1 or more while running')
    WHERE (NEW.attempt IS NOT OLD.attempt OR NEW.state IS NOT OLD.state)
      AND (NEW.attempt NOT BETWEEN 0 AND 2147483646 OR (NEW.state = 'running' AND NEW.attempt < 1));
    SELECT RAISE(ABORT, 'job row refused: `snoozes` must be 0 to 2147483646')
    WHERE (NEW.snoozes IS NOT OLD.snoozes)
      AND (NEW.snoozes NOT BETWEEN 0 AND 2147483646);
    SELECT RAISE(ABORT, 'job row refused: `max_attempts` must be 1 to 2147483647')
    WHERE (NEW.max_attempts IS NOT OLD.max_attempts)
      AND (NEW.max_attempts NOT BETWEEN 1 AND 2147483647);
    SELECT RAISE(ABORT, 'job row refused: `payload_version` must be 1 to 2147483647')
    WHERE (NEW.payload_version IS NOT OLD.payload_version)
      AND (NEW.payload_version NOT BETWEEN 1 AND 2147483647);
    SELECT RAISE(ABORT, 'job row refused: `run_at` must be from 0001-01-01 to 9999-12-31 UTC (microseconds since the Unix epoch)')
    WHERE (NEW.run_at IS NOT OLD.run_at)
      AND (NEW.run_at NOT BETWEEN -62135596800000000 AND 253402300799999999);
    SELECT RAISE(ABORT, 'job row refused: `deadline` must be from 0001-01-01 to 9999-12-31 UTC (microseconds since the Unix epoch)')
    WHERE (NEW.deadline IS NOT OLD.deadline)
      AND (NEW.deadline NOT BETWEEN -62135596800000000 AND 253402300799999999);
    SELECT RAISE(ABORT, 'job row refused: `created_at` must be from 0001-01-01 to 9999-12-31 UTC (microseconds since the Unix epoch)')
    WHERE (NEW.created_at IS NOT OLD.created_at)
      AND (NEW.created_at NOT BETWEEN -62135596800000000 AND 253402300799999999);
    SELECT RAISE(ABORT, 'job row refused: `finalized_at` must be from 0001-01-01 to 9999-12-31 UTC (microseconds since the Unix epoch)')
    WHERE (NEW.finalized_at IS NOT OLD.finalized_at)
      AND (NEW.finalized_at NOT BETWEEN -62135596800000000 AND 253402300799999999);
    SELECT RAISE(ABORT, 'job row refused: `locked_until` must be from 0001-01-01 to 9999-12-31 UTC (microseconds since the Unix epoch)')
    WHERE (NEW.locked_until IS NOT OLD.locked_until)
      AND (NEW.locked_until NOT BETWEEN -62135596800000000 AND 253402300799999999);
    SELECT RAISE(ABORT, 'job row refused: `stuck_since` must be from 0001-01-01 to 9999-12-31 UTC (microseconds since the Unix epoch)')
    WHERE (NEW.stuck_since IS NOT OLD.stuck_since)
      AND (NEW.stuck_since NOT BETWEEN -62135596800000000 AND 253402300799999999);
    SELECT RAISE(ABORT, 'job row refused: `locked_by` must be at most 128 bytes')
    WHERE (NEW.locked_by IS NOT OLD.locked_by)
      AND (length(CAST(NEW.locked_by AS BLOB)) > 128);
END;
