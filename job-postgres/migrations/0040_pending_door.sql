-- 0040 pending_door: a row written `pending` with nothing to wait for is not left there.
-- Append-only: change the schema in a new numbered file.
--
-- `pending` means waiting: behind its ordering key's head, or for the jobs it depends on. The
-- stager reaches a pending row only through those (an edge of job.dependencies, or its key
-- on job.ordering_wake), so a raw write of a pending row with neither (another language's
-- producer inserting `state = 'pending'`, an operator's `UPDATE ... SET state = 'pending'`,
-- a keyed row whose key has no other job: the admit trigger kept the state written and queued
-- no wake-up) was never run, and `job check` said the queue reconciled.
--
-- The trigger jobs_pending_door now looks at every row written `pending` when its transaction
-- commits (a deferred constraint trigger: the doors of this crate write a dependent pending
-- and its edges in one statement, a raw writer may write the edges after the row, in the same
-- transaction). A row still pending then, with no unresolved edge:
-- * without an ordering key becomes `available` (`scheduled` when its run_at is to come), as
--   the stager makes a dependent whose edges are all resolved;
-- * with a key that has no head, puts the key on the wake-up list: the stager promotes the
--   key's oldest pending job without open dependencies, under the key's lock (under
--   REPEATABLE READ or SERIALIZABLE, whose snapshot may show a head finished since, always).
-- A row waiting for something is left alone, at the cost of one look at its edges (and its
-- key's head) at commit. Rows not written pending pay nothing (the WHEN clause).
--
-- A transaction that sets its constraints IMMEDIATE (`SET CONSTRAINTS ALL IMMEDIATE`) has
-- the look at the end of the statement instead: write the edges in the same statement then.
--
-- The rows stranded so before this migration are repaired the same way here (read through
-- jobs_ordering_pending_idx, which holds every pending row).

CREATE FUNCTION job.pending_door() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    -- The row as it is now, at commit, not as the event saw it.
    SELECT j.id, j.ordering_key, j.queue, j.run_at INTO r
    FROM job.jobs j
    WHERE j.id = NEW.id AND j.state = 'pending';
    IF NOT FOUND
       OR EXISTS (SELECT 1 FROM job.dependencies d WHERE d.job_id = r.id AND NOT d.resolved) THEN
        RETURN NULL;
    END IF;
    IF r.ordering_key IS NULL THEN
        UPDATE job.jobs j
        SET state = CASE WHEN j.run_at > now() THEN 'scheduled'
                         ELSE 'available' END::job.job_state
        WHERE j.id = r.id AND j.state = 'pending';
        IF r.run_at <= now() THEN
            PERFORM pg_notify('job_insert', r.queue);
        END IF;
    ELSIF current_setting('transaction_isolation') <> 'read committed'
          OR NOT EXISTS (SELECT 1 FROM job.jobs h
                         WHERE h.ordering_key = r.ordering_key
                           AND h.state IN ('scheduled', 'available', 'running', 'retryable')) THEN
        PERFORM job.ordering_wake_later(r.ordering_key, false);
    END IF;
    RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION job.pending_door() FROM PUBLIC;

CREATE CONSTRAINT TRIGGER jobs_pending_door
    AFTER INSERT OR UPDATE OF state ON job.jobs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.state = 'pending')
    EXECUTE FUNCTION job.pending_door();

-- The rows stranded before: the same repair, once.
WITH stranded AS (
    SELECT j.id, j.ordering_key
    FROM job.jobs j
    WHERE j.state = 'pending'
      AND NOT EXISTS (SELECT 1 FROM job.dependencies d WHERE d.job_id = j.id AND NOT d.resolved)
),
freed AS (
    UPDATE job.jobs j
    SET state = CASE WHEN j.run_at > now() THEN 'scheduled'
                     ELSE 'available' END::job.job_state
    FROM stranded s
    WHERE j.id = s.id AND s.ordering_key IS NULL
)
INSERT INTO job.ordering_wake (ordering_key)
SELECT DISTINCT s.ordering_key
FROM stranded s
WHERE s.ordering_key IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM job.jobs h
                  WHERE h.ordering_key = s.ordering_key
                    AND h.state IN ('scheduled', 'available', 'running', 'retryable'));
