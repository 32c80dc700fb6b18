-- 0013 dependencies: jobs that wait for other jobs, and batches (members and a callback that
-- runs once every member has finished). Append-only: change the schema in a new numbered file.
--
-- A dependent job is inserted, in the enqueuer's transaction, with one row per job it waits
-- for in job.dependencies, and set `pending` (the state no claim reads, migration 0011). The
-- stager resolves (job.dependencies_resolve, called from stage.sql, so within about a poll
-- interval): when every job a dependent waits for has ended as its edge's mode asks, the
-- dependent becomes available (or scheduled, if its run_at is later); when one that had to
-- complete ended cancelled or discarded instead, or no longer exists, the dependent is
-- discarded with class `dependency` naming it, and that discard in turn ends its own
-- dependents on a later pass.
--
-- Why the stager and not a trigger on the finishing job: a finished job cannot tell whether
-- anything waits for it without a lookup, and a row trigger doing that lookup on every
-- completion would tax every job; marking the job instead (a flag set when a dependent is
-- enqueued) would lock it from the enqueuer's transaction and hold up its heartbeat and
-- finalize. The stager reads only unresolved edges (dependencies_open_idx), so jobs without
-- dependencies cost nothing, and no write of the hot path changes.
--
-- No foreign keys: a reference to job.jobs would take a KEY SHARE lock on the job waited for
-- from the enqueuer's transaction, which the finalize's FOR UPDATE would wait on. Edges of a
-- dependent go with it (prune.sql and purge.sql delete them); an edge whose dependency is gone
-- counts as that dependency not having completed.

CREATE TABLE job.dependencies (
    job_id     bigint  NOT NULL,
    depends_on bigint  NOT NULL,
    mode       text    NOT NULL CONSTRAINT dependencies_mode_check
                       CHECK (mode IN ('completed', 'finished')),
    resolved   boolean NOT NULL DEFAULT false,
    PRIMARY KEY (job_id, depends_on)
);

CREATE INDEX dependencies_open_idx ON job.dependencies (depends_on) WHERE NOT resolved;

-- Raises a `check_violation` naming `depends_on` when a job of `ids` does not exist; else true.
CREATE FUNCTION job.dependencies_exist(ids bigint[]) RETURNS boolean
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    missing bigint;
BEGIN
    SELECT i INTO missing
    FROM unnest(ids) AS i
    WHERE NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.id = i)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job row refused: `depends_on` names job %, which does not exist', missing
            USING ERRCODE = 'check_violation', COLUMN = 'depends_on', TABLE = 'jobs',
                  SCHEMA = 'job';
    END IF;
    RETURN true;
END
$$;

-- The stager's pass: up to `max_jobs` dependents with an edge whose job has ended (or is
-- gone), each locked (skipped when someone holds it: the next pass sees it), its ended edges
-- marked resolved, then discarded, promoted or left waiting. Returns how many it discarded or
-- promoted.
CREATE FUNCTION job.dependencies_resolve(max_jobs integer) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dependent bigint;
    failed record;
    woken text;
    changed integer := 0;
BEGIN
    FOR dependent IN
        SELECT DISTINCT d.job_id
        FROM job.dependencies d
        LEFT JOIN job.jobs x ON x.id = d.depends_on
        WHERE NOT d.resolved
          AND (x.id IS NULL OR x.state IN ('completed', 'cancelled', 'discarded'))
        LIMIT max_jobs
    LOOP
        PERFORM 1 FROM job.jobs j WHERE j.id = dependent FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.id = dependent) THEN
                DELETE FROM job.dependencies d WHERE d.job_id = dependent;
            END IF;
            CONTINUE;
        END IF;
        UPDATE job.dependencies d
        SET resolved = true
        WHERE d.job_id = dependent AND NOT d.resolved
          AND NOT EXISTS (SELECT 1 FROM job.jobs x
                          WHERE x.id = d.depends_on
                            AND x.state NOT IN ('completed', 'cancelled', 'discarded'));
        SELECT d.depends_on, coalesce(x.state::text, 'deleted') AS ended INTO failed
        FROM job.dependencies d
        LEFT JOIN job.jobs x ON x.id = d.depends_on
        WHERE d.job_id = dependent AND d.mode = 'completed'
          AND (x.id IS NULL OR x.state IN ('cancelled', 'discarded'))
        ORDER BY d.depends_on
        LIMIT 1;
        IF FOUND THEN
            -- clock_timestamp(), not now(): now() is the start of the stager's statement,
            -- which may be before the dependency was finalized.
            UPDATE job.jobs j
            SET state        = 'discarded',
                finalized_at = clock_timestamp(),
                errors       = job.push_error(j.errors, jsonb_build_object(
                    'attempt', j.attempt,
                    'at', clock_timestamp(),
                    'class', 'dependency',
                    'message', format('job %s, which this job depends on, was %s',
                                      failed.depends_on, failed.ended)))
            WHERE j.id = dependent AND j.state = 'pending';
            IF FOUND THEN
                changed := changed + 1;
            END IF;
            UPDATE job.dependencies d SET resolved = true
            WHERE d.job_id = dependent AND NOT d.resolved;
        ELSIF NOT EXISTS (SELECT 1 FROM job.dependencies d
                          WHERE d.job_id = dependent AND NOT d.resolved) THEN
            UPDATE job.jobs j
            SET state = CASE WHEN j.run_at > now() THEN 'scheduled'
                             ELSE 'available' END::job.job_state
            WHERE j.id = dependent AND j.state = 'pending'
            RETURNING CASE WHEN j.state = 'available' THEN j.queue END INTO woken;
            IF FOUND THEN
                changed := changed + 1;
                IF woken IS NOT NULL THEN
                    PERFORM pg_notify('job_insert', woken);
                END IF;
            END IF;
        END IF;
    END LOOP;
    RETURN changed;
END
$$;

-- As every function of the schema: no EXECUTE for PUBLIC. The workers' role needs it on both
-- (the README's grants): enqueueing with dependencies calls the first, the stager the second.
REVOKE ALL ON FUNCTION job.dependencies_exist(bigint[]), job.dependencies_resolve(integer)
    FROM PUBLIC;
