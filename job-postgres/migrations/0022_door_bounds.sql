-- 0022 door bounds: what a raw write (any role with table privileges: the README's worker
-- role) could store and a worker or a reader would then fail on, for every row of its batch
-- or every call, is refused by the table; a job that both waits for dependencies and holds an
-- ordering key (the doors refuse one, a raw write can make it) no longer stops the stager;
-- and `job.ordering_lock_keys` runs as its owner. Append-only: change the schema in a new
-- numbered file.
--
-- The constraints are NOT VALID: they hold for every row written from now on, without a scan
-- of the table under its lock at the upgrade.
--
-- Counters: a claim adds 1 to `attempt` and a snooze 1 to `snoozes`, and a release or a
-- snooze takes 1 from `attempt` of a running row. A row at the integer's maximum made every
-- claim of its queue fail ("integer out of range"), and a running row at attempt 0 every
-- release batch it was in.
ALTER TABLE job.jobs DROP CONSTRAINT jobs_attempt_check;
ALTER TABLE job.jobs ADD CONSTRAINT jobs_attempt_check
    CHECK (attempt >= 0 AND attempt < 2147483647 AND (state <> 'running' OR attempt >= 1))
    NOT VALID;
ALTER TABLE job.jobs DROP CONSTRAINT jobs_snoozes_check;
ALTER TABLE job.jobs ADD CONSTRAINT jobs_snoozes_check
    CHECK (snoozes >= 0 AND snoozes < 2147483647) NOT VALID;

-- Tags: an array whose first index is not 1 ('[5:5]={a}') is a valid text[] that readers
-- (sqlx) refuse to decode, so one such row failed every listing it was in.
ALTER TABLE job.jobs ADD CONSTRAINT jobs_tags_check
    CHECK (cardinality(tags) = 0 OR array_lower(tags, 1) = 1) NOT VALID;

-- Times the readers decode: infinity or a year past 9999 made them panic (chrono), as for the
-- columns of migration 0007.
ALTER TABLE job.jobs ADD CONSTRAINT jobs_progress_at_check
    CHECK (progress_at >= '0001-01-01 00:00:00+00' AND progress_at < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.jobs ADD CONSTRAINT jobs_stuck_since_check
    CHECK (stuck_since >= '0001-01-01 00:00:00+00' AND stuck_since < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.pauses ADD CONSTRAINT pauses_paused_at_check
    CHECK (paused_at >= '0001-01-01 00:00:00+00' AND paused_at < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.pauses ADD CONSTRAINT pauses_resume_at_check
    CHECK (resume_at >= '0001-01-01 00:00:00+00' AND resume_at < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.steps ADD CONSTRAINT steps_recorded_at_check
    CHECK (recorded_at >= '0001-01-01 00:00:00+00' AND recorded_at < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.leaders ADD CONSTRAINT leaders_until_check
    CHECK (until >= '0001-01-01 00:00:00+00' AND until < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.breakers ADD CONSTRAINT breakers_window_start_check
    CHECK (window_start >= '0001-01-01 00:00:00+00' AND window_start < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.breakers ADD CONSTRAINT breakers_tripped_at_check
    CHECK (tripped_at >= '0001-01-01 00:00:00+00' AND tripped_at < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.compensations ADD CONSTRAINT compensations_updated_at_check
    CHECK (updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.kind_owners ADD CONSTRAINT kind_owners_updated_at_check
    CHECK (updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00') NOT VALID;
ALTER TABLE job.rate_windows ADD CONSTRAINT rate_windows_updated_at_check
    CHECK (updated_at >= '0001-01-01 00:00:00+00' AND updated_at < '10000-01-01 00:00:00+00') NOT VALID;

-- The Rust producer's bulk enqueue calls this with table privileges only (the README's worker
-- role): as its caller it could not call job.ordering_lock_key, which is not PUBLIC. It takes
-- advisory locks only, which any role can take with the same numbers.
ALTER FUNCTION job.ordering_lock_keys(text[]) SECURITY DEFINER;
ALTER FUNCTION job.ordering_lock_keys(text[]) SET search_path = pg_catalog, pg_temp;

-- A pending job with both open dependencies and an ordering key: the stager promoted it when
-- its dependencies ended without asking its key, and when the key had a head that update
-- broke jobs_ordering_head_idx, failing the stager's whole statement on every pass, for every
-- queue. The key's promotion, for its part, promoted such a job while it still waited for its
-- dependencies. Now each waits for the other.
CREATE OR REPLACE FUNCTION job.ordering_promote(key text) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    next record;
BEGIN
    IF EXISTS (SELECT 1 FROM job.jobs h
               WHERE h.ordering_key = key
                 AND h.state IN ('scheduled', 'available', 'running', 'retryable')) THEN
        RETURN false;
    END IF;
    SELECT p.id, p.queue, p.run_at INTO next
    FROM job.jobs p
    WHERE p.ordering_key = key AND p.state = 'pending'
      AND NOT EXISTS (SELECT 1 FROM job.dependencies d WHERE d.job_id = p.id AND NOT d.resolved)
    ORDER BY p.id
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- A pending row is written only under the key's lock, which the caller holds, or by an
    -- operator's cancel or purge; the guard skips a row that one of those just finished.
    UPDATE job.jobs
    SET state = CASE WHEN next.run_at > now() THEN 'scheduled' ELSE 'available' END::job.job_state
    WHERE id = next.id AND state = 'pending';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF next.run_at <= now() THEN
        PERFORM pg_notify('job_insert', next.queue);
    END IF;
    RETURN true;
END
$$;


CREATE OR REPLACE FUNCTION job.dependencies_resolve(max_jobs integer) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dependent bigint;
    failed record;
    woken text;
    okey text;
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
    RETURN changed;
END
$$;

