-- 0031 dependency outcomes: an edge keeps whether its job satisfied it, and every edge is found
-- from the job it points at. Append-only: change the schema in a new numbered file.
--
-- 1. An edge recorded `resolved` only. Redrive (redrive.sql) opens again the resolved edges of
--    a dead letter that their jobs do not satisfy now, and took a job that no longer exists for
--    one that completed and was pruned since: a dependent discarded because the job it
--    depended on was cancelled or discarded, redriven once that job had been pruned
--    (cancelled) or purged (a dead letter), went straight to `available` and ran, although
--    what it needed never completed. job.dependencies_resolve now writes `satisfied` when it
--    resolves an edge: true for an `after_all` edge (any end satisfies it) and for a job that
--    completed, false for a `depends_on` edge whose job was cancelled, discarded or deleted.
--    Redrive opens an edge with `satisfied = false` again whether or not its job still exists
--    (the stager then discards the dependent again, naming the job as deleted), and keeps an
--    edge with `satisfied = true` resolved when its job is gone. Null is unknown: the edges
--    resolved before this migration, and those the stager closes unended when it discards
--    their dependent for another edge; redrive judges them by their job, as before.
--
-- 2. The pruner kept only a job that an unresolved edge points at. The stager resolves a
--    batch's member's edge as soon as the member ends, so the early members of a long batch
--    were pruned (after the completed retention, 24 h by default) before the callback ran, and
--    the callback, which the README promises can read its members' state, errors and result,
--    found them missing. The pruner now also keeps a job that any edge points at whose
--    dependent has not finished (prune_pick.sql, prune.sql). That reads every edge of a job,
--    resolved or not, and so does redrive, which opens again the edges pointing at the jobs it
--    redrives: the partial indexes (dependencies_open_idx, dependencies_fresh_idx) hold only
--    open edges, so dependencies_depends_on_idx holds them all, one more index entry written
--    per edge at enqueue. A pruner pass reads again the jobs it keeps this way that finished
--    before those it deletes, each time: 2-4.5 ms a pass per 1,000 of them (measured with
--    100,000 completed jobs whose dependents were still waiting), where it read none.
--
-- 3. The stager discards a dependent whose `completed`-mode dependency ended otherwise, and
--    took a missing job for such an end whatever its edge recorded: a dependent of B and C,
--    discarded because C was, redriven with C once the cause was fixed, was discarded again
--    as "B was deleted" after C completed, B having completed (or completed after the discard)
--    and been pruned meanwhile. A missing job is a failure now only when its edge recorded
--    one (`satisfied` false: resolved because the job was missing, or did not complete); an
--    edge that recorded it satisfied, and one closed without a verdict (null), read as
--    redrive reads them: not waited for again.
--
-- ADD COLUMN without a default does not rewrite the table; the CREATE INDEX reads it once (in
-- this migration's transaction, where CREATE INDEX CONCURRENTLY cannot run; on a large table,
-- apply it when writes of job.dependencies can wait that long).

ALTER TABLE job.dependencies ADD COLUMN satisfied boolean;

CREATE INDEX dependencies_depends_on_idx ON job.dependencies (depends_on);

-- As in migration 0023, each resolved edge now recording `satisfied`. (CREATE OR REPLACE sets
-- the function's settings anew: jit stays off, as migration 0024 set.)
CREATE OR REPLACE FUNCTION job.dependencies_resolve(max_jobs integer) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
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
        -- Each edge resolved here records whether its job satisfied it: an `after_all` edge
        -- by any end, a `depends_on` edge only by a completion (a job cancelled, discarded or
        -- deleted did not). Redrive reads it once the job may be gone (redrive.sql).
        UPDATE job.dependencies d
        SET resolved  = true,
            satisfied = d.mode = 'finished'
                        OR EXISTS (SELECT 1 FROM job.jobs x
                                   WHERE x.id = d.depends_on AND x.state = 'completed')
        WHERE d.job_id = dependent AND NOT d.resolved
          AND NOT EXISTS (SELECT 1 FROM job.jobs x
                          WHERE x.id = d.depends_on
                            AND x.state NOT IN ('completed', 'cancelled', 'discarded'));
        SELECT d.depends_on, coalesce(x.state::text, 'deleted') AS ended INTO failed
        FROM job.dependencies d
        LEFT JOIN job.jobs x ON x.id = d.depends_on
        WHERE d.job_id = dependent AND d.mode = 'completed'
          AND d.satisfied IS NOT TRUE
          AND (x.state IN ('cancelled', 'discarded')
               OR (x.id IS NULL AND d.satisfied IS FALSE))
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
            -- Its other open edges are closed with it, their jobs not ended: whether those
            -- will satisfy them is not known (null).
            UPDATE job.dependencies d SET resolved = true, satisfied = NULL
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
