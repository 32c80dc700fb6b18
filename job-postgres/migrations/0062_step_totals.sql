-- 0062 step_totals: a job's step count and output bytes are kept in a row of their own, so a
-- step's save reads them, not every step the job has. Append-only: change the schema in a new
-- numbered file.
--
-- step_save.sql records a new step only while the job has fewer than job_core::MAX_STEPS
-- (10,000) steps and its outputs, with the new one, add up to at most MAX_STEPS_TOTAL bytes.
-- It counted the job's steps and summed their sizes on every save: each save read every step
-- before it, and a job that reached 10,000 steps had read about 50 million rows in all; with
-- 9,998 steps recorded, one save took 4.6 ms where the first takes 0.15 ms. A worker's step
-- saves share one connection, one at a time, so one such job slowed the steps of every other
-- job on the worker.
--
-- job.step_totals holds, per job with steps, how many it has and their bytes: output_bytes
-- (migration 0049), or for a row without it (a worker of an earlier release, an operator's
-- SQL) the length of its JSON text, which the triggers can measure alike on the way in and on
-- the way out. step_save.sql counted such a row's stored size, which the INSERT trigger's
-- transition table cannot give (it holds the value before PostgreSQL compresses it: a
-- 40,012-byte output stored in 486 bytes was added as 40,012 and taken away as 486).
-- Statement-level triggers on job.steps keep it, whoever writes the steps (a worker of an
-- earlier release, an operator's SQL): one statement per INSERT (a save inserts one step; a
-- bulk insert of many steps of one job adds them at once, where a trigger per row would
-- rewrite the job's row once per step), per DELETE (a prune or purge deletes the steps of many
-- jobs at once: migration 0057) and per UPDATE, and a TRUNCATE empties it. A job's row goes
-- when its last step does. The functions are SECURITY DEFINER, as migration 0057's are: a role
-- that may write steps need not be granted the totals.
--
-- A worker reads it and locks its job's row (step_save.sql runs as the worker's role, and a
-- locking read asks for UPDATE): SELECT and UPDATE are granted here, as migration 0032 grants
-- the worker's block, to every role that holds the worker's privileges (UPDATE on job.jobs;
-- not the owner, PUBLIC or superusers), and the README's grants name it.
-- Filled here from the steps already recorded, under a lock that holds off writes to
-- job.steps until this migration commits (step saves wait that long).

LOCK TABLE job.steps IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE job.step_totals (
    job_id bigint NOT NULL PRIMARY KEY,
    steps  integer NOT NULL,
    bytes  bigint NOT NULL
);

INSERT INTO job.step_totals (job_id, steps, bytes)
SELECT s.job_id, count(*), sum(coalesce(s.output_bytes, octet_length(s.output::text)))
FROM job.steps s
GROUP BY s.job_id;

-- The steps a statement inserted, per job: added to the totals.
CREATE FUNCTION job.count_steps_added() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO job.step_totals AS t (job_id, steps, bytes)
    SELECT a.job_id, count(*), sum(coalesce(a.output_bytes, octet_length(a.output::text)))
    FROM added a
    GROUP BY a.job_id
    ON CONFLICT (job_id) DO UPDATE
    SET steps = t.steps + excluded.steps,
        bytes = t.bytes + excluded.bytes;
    RETURN NULL;
END
$$;

CREATE TRIGGER steps_count_insert AFTER INSERT ON job.steps
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION job.count_steps_added();

-- The steps a statement deleted, per job: taken from the totals, a job's row gone with its
-- last step.
CREATE FUNCTION job.uncount_steps() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- A job whose steps all went (a prune, a purge) loses its row at once; the others are
    -- updated. Disjoint rows, so two data-modifying parts of one statement may.
    WITH g AS (
        SELECT o.job_id, count(*) AS steps,
               sum(coalesce(o.output_bytes, octet_length(o.output::text))) AS bytes
        FROM gone o
        GROUP BY o.job_id
    ),
    emptied AS (
        DELETE FROM job.step_totals t
        USING g
        WHERE t.job_id = g.job_id AND t.steps <= g.steps
    )
    UPDATE job.step_totals t
    SET steps = t.steps - g.steps,
        bytes = t.bytes - g.bytes
    FROM g
    WHERE t.job_id = g.job_id AND t.steps > g.steps;
    RETURN NULL;
END
$$;

CREATE TRIGGER steps_uncount AFTER DELETE ON job.steps
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION job.uncount_steps();

-- The steps a statement updated (no writer of the framework does; an operator's SQL may move a
-- step to another job, or change its output): their old values taken from their old jobs'
-- totals, their new ones added to their new jobs'. A trigger with transition tables takes no
-- column list, so every UPDATE of job.steps runs it.
CREATE FUNCTION job.recount_steps() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    WITH g AS (
        SELECT o.job_id, count(*) AS steps,
               sum(coalesce(o.output_bytes, octet_length(o.output::text))) AS bytes
        FROM gone o
        GROUP BY o.job_id
    )
    UPDATE job.step_totals t
    SET steps = t.steps - g.steps,
        bytes = t.bytes - g.bytes
    FROM g
    WHERE t.job_id = g.job_id;
    INSERT INTO job.step_totals AS t (job_id, steps, bytes)
    SELECT a.job_id, count(*), sum(coalesce(a.output_bytes, octet_length(a.output::text)))
    FROM added a
    GROUP BY a.job_id
    ON CONFLICT (job_id) DO UPDATE
    SET steps = t.steps + excluded.steps,
        bytes = t.bytes + excluded.bytes;
    DELETE FROM job.step_totals t
    WHERE t.job_id = ANY (ARRAY(SELECT DISTINCT o.job_id FROM gone o)) AND t.steps <= 0;
    RETURN NULL;
END
$$;

CREATE TRIGGER steps_recount AFTER UPDATE ON job.steps
    REFERENCING OLD TABLE AS gone NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION job.recount_steps();

CREATE FUNCTION job.truncate_step_totals() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    TRUNCATE job.step_totals;
    RETURN NULL;
END
$$;

CREATE TRIGGER steps_truncate_totals AFTER TRUNCATE ON job.steps
    FOR EACH STATEMENT EXECUTE FUNCTION job.truncate_step_totals();

-- Trigger functions: no role calls them (a trigger runs its function whatever the role's
-- EXECUTE), so PUBLIC may not either.
REVOKE ALL ON FUNCTION job.count_steps_added() FROM PUBLIC;
REVOKE ALL ON FUNCTION job.uncount_steps() FROM PUBLIC;
REVOKE ALL ON FUNCTION job.recount_steps() FROM PUBLIC;
REVOKE ALL ON FUNCTION job.truncate_step_totals() FROM PUBLIC;

DO $grants$
DECLARE
    worker text;
BEGIN
    FOR worker IN
        SELECT DISTINCT a.grantee::pg_catalog.regrole::text
        FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a, pg_catalog.pg_roles r
        WHERE c.oid = 'job.jobs'::pg_catalog.regclass
          AND a.privilege_type = 'UPDATE'
          AND a.grantee <> c.relowner
          AND r.oid = a.grantee
          AND NOT r.rolsuper
    LOOP
        EXECUTE pg_catalog.format('GRANT SELECT, UPDATE ON job.step_totals TO %s', worker);
    END LOOP;
END
$grants$;
