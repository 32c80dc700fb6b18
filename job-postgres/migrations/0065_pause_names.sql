-- 0065 pause_names: job.pauses takes only the names a queue or kind can have, from any
-- writer. Append-only: change the schema in a new numbered file.
--
-- The Rust side (`Pause::check`), the CLI and the dashboard refuse to pause a name no queue or
-- kind can have (job.name_problem), and the breaker writes only kinds job.breaker_record
-- checked. But an operator with INSERT on job.pauses (the README's operator grants) could
-- write any name of 1 to 128 bytes by hand: `INSERT INTO job.pauses (scope, name) VALUES
-- ('queue', 'emails ')` paused nothing (no job's queue has a trailing space), was listed by
-- `job pauses` and the dashboard as in force, and could not be resumed by either, which
-- refused the name. A trigger now refuses such a name with the doors' words (as
-- compensations_names does for job.compensations, migration 0025): SECURITY DEFINER, so the
-- writer needs no EXECUTE on job.name_problem, and the quick test inline, so a good name costs
-- no call. Rows written before this migration are left as they are: `Admin::resume` deletes
-- a stored pause whatever its name (job-postgres/src/admin.rs).
--
-- And job.dependencies_exist, given a NULL among its ids, said "names job <NULL>, which does
-- not exist"; it now says the id is null.

CREATE FUNCTION job.check_pause() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    problem text := job.name_problem(NEW.name);
BEGIN
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'pause refused: the % name %', NEW.scope, problem
            USING ERRCODE = 'check_violation', COLUMN = 'name', TABLE = 'pauses',
                  SCHEMA = 'job', CONSTRAINT = 'pauses_names';
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION job.check_pause() FROM PUBLIC;

DO $names$
BEGIN
    EXECUTE format(
        'CREATE TRIGGER pauses_names '
        'BEFORE INSERT OR UPDATE OF name ON job.pauses FOR EACH ROW '
        'WHEN ((octet_length(NEW.name) BETWEEN 1 AND 128 AND NEW.name !~ %L) IS NOT TRUE) '
        'EXECUTE FUNCTION job.check_pause()',
        job.forbidden_in_names());
END
$names$;

CREATE OR REPLACE FUNCTION job.dependencies_exist(ids bigint[]) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    missing bigint;
BEGIN
    IF array_position(ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'job row refused: `depends_on` holds a null job id'
            USING ERRCODE = 'check_violation', COLUMN = 'depends_on', TABLE = 'jobs',
                  SCHEMA = 'job';
    END IF;
    PERFORM 1 FROM job.jobs j WHERE j.id = ANY (ids) ORDER BY j.id FOR KEY SHARE OF j;
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
