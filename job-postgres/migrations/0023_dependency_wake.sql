-- 0023 dependency wake-ups: the stager's resolution of dependents reads what ended, not every
-- open edge. Append-only: change the schema in a new numbered file.
--
-- job.dependencies_resolve (migration 0013) found the dependents to resolve by joining every
-- unresolved edge to the job it waits for, on every pass of every worker's stager (about once
-- a second each): with 100,000 open edges whose jobs were still waiting or running, a pass
-- read 100,000 edges and as many jobs to find nothing, about 60 ms of the server's CPU per
-- worker per second. Now a pass reads what changed:
--
-- * job.jobs.awaited marks a job that an unresolved edge points at, and jobs_awaited_idx
--   holds such jobs once they have ended (completed, cancelled, discarded). Every statement
--   that ends a job (finalize, cancel, rescue, expire, prune's discards, raw SQL) puts it
--   there by its own UPDATE, with no trigger and no change to those statements; a job nobody
--   waits for is never in the index, so the hot path pays one predicate test per row.
-- * The flag is set by the stager, not by the enqueue: setting it there would lock the job
--   waited for (an UPDATE's FOR NO KEY UPDATE) until the application's transaction ends, and
--   a running job's heartbeat and finalize would wait for it (migration 0019 took FOR KEY
--   SHARE only, for this reason). New edges are `flagged = false` (jobs_dependencies_fresh_idx):
--   each pass flags up to its limit of them, skipping jobs someone holds (tried again on the
--   next pass). A job that had already ended when flagged enters jobs_awaited_idx at once.
-- * The pass then resolves the dependents of ended, awaited jobs (the same per-dependent steps
--   as before, unchanged) and clears the flag of ended jobs that no open edge points at any
--   longer.
-- * A job waited for that is deleted (a purge of dead letters, raw SQL; the pruner keeps
--   such jobs) leaves no ended row behind to find: a sweep, the old full read, runs at most
--   once a minute across the cluster (job.dependency_sweep, claimed FOR UPDATE SKIP LOCKED),
--   and an edge whose job is missing when it is flagged is resolved at once.
--
-- Existing open edges start unflagged and are flagged over the first passes after the upgrade.
-- ADD COLUMN with a constant default does not rewrite the table; the CREATE INDEXes read it
-- once (in this migration's transaction, where CREATE INDEX CONCURRENTLY cannot run; on a
-- large table, apply it when writes can wait that long).

ALTER TABLE job.jobs ADD COLUMN awaited boolean NOT NULL DEFAULT false;
ALTER TABLE job.dependencies ADD COLUMN flagged boolean NOT NULL DEFAULT false;

CREATE INDEX jobs_awaited_idx ON job.jobs (id)
    WHERE awaited AND state IN ('completed', 'cancelled', 'discarded');
CREATE INDEX dependencies_fresh_idx ON job.dependencies (depends_on)
    WHERE NOT flagged AND NOT resolved;

-- One row: when the last sweep started.
CREATE TABLE job.dependency_sweep (
    one boolean     PRIMARY KEY DEFAULT true CONSTRAINT dependency_sweep_one_check CHECK (one),
    at  timestamptz NOT NULL CONSTRAINT dependency_sweep_at_check
                    CHECK (at BETWEEN '0001-01-01 00:00:00+00' AND '9999-12-31 23:59:59.999999+00')
);
INSERT INTO job.dependency_sweep (at) VALUES ('2000-01-01 00:00:00+00');

CREATE OR REPLACE FUNCTION job.dependencies_resolve(max_jobs integer) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dependent bigint;
    candidates bigint[];
    failed record;
    woken text;
    okey text;
    changed integer := 0;
BEGIN
    -- Flag the jobs that new edges wait for. Every write to an edge is made under its
    -- dependent's row lock, here as in the resolution below, and every lock is taken SKIP
    -- LOCKED, so that concurrent passes never wait for each other: a dependent or a job waited
    -- for that someone holds is flagged on a later pass. The dependents of an edge whose job
    -- no longer exists are resolved in this pass.
    WITH fresh AS (
        SELECT d.job_id, d.depends_on
        FROM job.dependencies d
        WHERE NOT d.flagged AND NOT d.resolved
        ORDER BY d.depends_on
        LIMIT max_jobs
    ),
    mine AS (
        SELECT j.id
        FROM job.jobs j
        WHERE j.id = ANY (ARRAY(SELECT DISTINCT f.job_id FROM fresh f))
        ORDER BY j.id
        FOR NO KEY UPDATE SKIP LOCKED
    ),
    held AS (
        SELECT j.id, j.awaited
        FROM job.jobs j
        WHERE j.id = ANY (ARRAY(SELECT DISTINCT f.depends_on FROM fresh f
                                WHERE f.job_id IN (SELECT m.id FROM mine m)))
        ORDER BY j.id
        FOR NO KEY UPDATE SKIP LOCKED
    ),
    awaited AS (
        UPDATE job.jobs j
        SET awaited = true
        WHERE j.id = ANY (ARRAY(SELECT h.id FROM held h WHERE NOT h.awaited))
    ),
    marked AS (
        UPDATE job.dependencies d
        SET flagged = true
        FROM fresh f
        WHERE d.job_id = f.job_id AND d.depends_on = f.depends_on
          AND f.job_id IN (SELECT m.id FROM mine m)
          AND (f.depends_on IN (SELECT h.id FROM held h)
               OR NOT EXISTS (SELECT 1 FROM job.jobs x WHERE x.id = f.depends_on))
        RETURNING d.job_id, d.depends_on
    )
    SELECT coalesce(array_agg(DISTINCT m.job_id), '{}') INTO candidates
    FROM marked m
    WHERE m.depends_on NOT IN (SELECT h.id FROM held h);

    -- The dependents of jobs that have ended (jobs_awaited_idx).
    candidates := candidates || ARRAY(
        SELECT DISTINCT d.job_id
        FROM job.jobs p
        JOIN job.dependencies d ON d.depends_on = p.id AND NOT d.resolved
        WHERE p.awaited AND p.state IN ('completed', 'cancelled', 'discarded')
        LIMIT max_jobs);

    -- At most once a minute, cluster-wide: every open edge, for jobs waited for that were
    -- deleted.
    PERFORM 1 FROM job.dependency_sweep s WHERE s.at < now() - interval '1 minute'
    FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        UPDATE job.dependency_sweep SET at = now();
        candidates := candidates || ARRAY(
            SELECT DISTINCT d.job_id
            FROM job.dependencies d
            LEFT JOIN job.jobs x ON x.id = d.depends_on
            WHERE NOT d.resolved
              AND (x.id IS NULL OR x.state IN ('completed', 'cancelled', 'discarded'))
            LIMIT max_jobs);
    END IF;

    FOR dependent IN SELECT DISTINCT c FROM unnest(candidates) AS c ORDER BY c LIMIT max_jobs
    LOOP
        SELECT j.ordering_key INTO okey FROM job.jobs j WHERE j.id = dependent
        FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.id = dependent) THEN
                DELETE FROM job.dependencies d WHERE d.job_id = dependent;
            END IF;
            CONTINUE;
        END IF;
        -- A keyed dependent (the doors refuse one, a raw write can make it) is promoted only
        -- through its key, under the key's lock: a key whose lock another transaction holds
        -- is tried again on the next pass.
        IF okey IS NOT NULL AND NOT pg_try_advisory_xact_lock(job.ordering_lock_key(okey)) THEN
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
        ELSIF okey IS NOT NULL THEN
            -- Its key's oldest pending job without open dependencies becomes the head, when
            -- the key has none; otherwise the key's release promotes it in its turn.
            IF job.ordering_promote(okey) THEN
                changed := changed + 1;
            END IF;
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

    -- Ended jobs that no open edge points at any longer leave jobs_awaited_idx.
    UPDATE job.jobs j
    SET awaited = false
    WHERE j.id = ANY (ARRAY(
        SELECT p.id
        FROM job.jobs p
        WHERE p.awaited AND p.state IN ('completed', 'cancelled', 'discarded')
          AND NOT EXISTS (SELECT 1 FROM job.dependencies d
                          WHERE d.depends_on = p.id AND NOT d.resolved)
        LIMIT max_jobs
        FOR NO KEY UPDATE SKIP LOCKED))
      AND j.awaited;
    RETURN changed;
END
$$;
