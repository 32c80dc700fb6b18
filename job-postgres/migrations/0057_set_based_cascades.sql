-- 0057 set_based_cascades: a job's steps and dependency edges go with it in one statement per
-- DELETE, not one per job. Append-only: change the schema in a new numbered file.
--
-- job.steps.job_id (migration 0003) and job.dependencies.job_id (migration 0037) had foreign
-- keys to job.jobs with ON DELETE CASCADE. PostgreSQL runs a foreign key's cascade as a
-- trigger per deleted row, each a query of the referencing table of its own: pruning 1,000
-- completed jobs spent 2.6 ms in the steps key's trigger and 2.3 ms in the edges' key's, of
-- 7.0 ms (EXPLAIN ANALYZE of prune.sql), and the pruner's batches of 1,000 (prune_pick.sql and
-- prune.sql in a transaction each) took 9.2 µs a job with the keys, 4.3 µs without them
-- (200,000 completed jobs, this machine): a cost paid for every job the framework keeps and
-- then prunes, though few have steps or edges.
--
-- The keys are replaced by what they did, in set-based triggers:
-- * after each DELETE of job.jobs, a statement-level trigger deletes the steps and the
--   dependents' edges of the jobs it deleted (its transition table), each table read by its
--   primary key's leading column through an array, so a batch looks its rows up instead of
--   joining the whole table; for every DELETE, a raw one too, as the cascades did;
-- * after a TRUNCATE of job.jobs, the steps and edges are truncated too (the keys refused a
--   TRUNCATE of job.jobs without CASCADE, and CASCADE emptied both);
-- * a step or an edge written for a job that does not exist is refused as the keys refused
--   it (SQLSTATE 23503, naming the key that was: steps_job_id_fkey, dependencies_job_id_fkey),
--   and one written for a job locks the job's row FOR KEY SHARE until it commits, as a key's
--   check does: a DELETE of that job waits for it, then deletes it (the trigger's statements
--   see what committed before them), or, deleted first, the write finds no job and is refused.
-- Each function is SECURITY DEFINER, as a key's cascade and check run as the tables' owner: a
-- role that may delete jobs (the pruner's, an operator's purge) need not be granted the steps
-- or the edges. The edges pointing at a job (depends_on) still keep no key (migration 0037).
--
-- The keys are dropped under locks taken in the order every writer takes the tables, job.jobs
-- first (migration 0037): an enqueue with dependencies writes a job, then its edges; a step's
-- save locks its job's row, then writes the step.

LOCK TABLE job.jobs IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE job.steps, job.dependencies IN ACCESS EXCLUSIVE MODE;

ALTER TABLE job.steps DROP CONSTRAINT steps_job_id_fkey;
ALTER TABLE job.dependencies DROP CONSTRAINT dependencies_job_id_fkey;

CREATE FUNCTION job.delete_job_rows() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM job.steps s WHERE s.job_id = ANY (ARRAY(SELECT g.id FROM gone g));
    DELETE FROM job.dependencies d WHERE d.job_id = ANY (ARRAY(SELECT g.id FROM gone g));
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_delete_job_rows AFTER DELETE ON job.jobs
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION job.delete_job_rows();

CREATE FUNCTION job.truncate_job_rows() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    TRUNCATE job.steps, job.dependencies;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_truncate_job_rows AFTER TRUNCATE ON job.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION job.truncate_job_rows();

-- TG_ARGV[0]: the name of the key the check stands for.
CREATE FUNCTION job.check_job_exists() RETURNS trigger
    LANGUAGE plpgsql
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- A NULL is left to the column's NOT NULL, as a key leaves it.
    IF NEW.job_id IS NULL THEN
        RETURN NEW;
    END IF;
    PERFORM FROM job.jobs j WHERE j.id = NEW.job_id FOR KEY SHARE OF j;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'insert or update on table "%" violates foreign key constraint "%"',
                TG_TABLE_NAME, TG_ARGV[0]
            USING ERRCODE = 'foreign_key_violation',
                  CONSTRAINT = TG_ARGV[0],
                  TABLE = TG_TABLE_NAME,
                  SCHEMA = TG_TABLE_SCHEMA,
                  DETAIL = format('Key (job_id)=(%s) is not present in table "jobs".',
                                  NEW.job_id);
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER steps_job_exists BEFORE INSERT OR UPDATE OF job_id ON job.steps
    FOR EACH ROW EXECUTE FUNCTION job.check_job_exists('steps_job_id_fkey');

CREATE TRIGGER dependencies_job_exists BEFORE INSERT OR UPDATE OF job_id ON job.dependencies
    FOR EACH ROW EXECUTE FUNCTION job.check_job_exists('dependencies_job_id_fkey');

-- Trigger functions: no role calls them (a trigger runs its function whatever the role's
-- EXECUTE), so PUBLIC may not either.
REVOKE ALL ON FUNCTION job.delete_job_rows() FROM PUBLIC;
REVOKE ALL ON FUNCTION job.truncate_job_rows() FROM PUBLIC;
REVOKE ALL ON FUNCTION job.check_job_exists() FROM PUBLIC;
