-- 0019 a job waited for is held until its dependent's enqueue commits.
-- Append-only: change the schema in a new numbered file.
--
-- job.dependencies_exist checked that the jobs waited for exist, and held nothing: the pruner,
-- which keeps a job that an unresolved edge points at, could not see the edge before the
-- enqueue committed, and deleted a completed dependency in between; the stager then discarded
-- the dependent ("was deleted") although what it waited for had completed. The check now
-- takes FOR KEY SHARE on the rows, in id order, until the enqueue's transaction ends, as a
-- foreign key would: it forbids only deleting them. The pruner's FOR UPDATE SKIP LOCKED
-- passes them by, a purge waits. Every statement that only updates a job (claim, heartbeat,
-- finalize, release, rescue, stage, expire) locks FOR NO KEY UPDATE, which does not conflict
-- with it, so an application's open transaction holds up none of them. (The stager's
-- job.dependencies_resolve still locks a dependent FOR UPDATE SKIP LOCKED: a pending job
-- waited for by an enqueue still open is resolved once that enqueue ends.)
-- A row deleted while the check waited for it is missing, and refused as before. VOLATILE, so
-- that the second statement sees what the first waited for (sql/dependencies_add.sql calls
-- it once, as a subquery).

CREATE OR REPLACE FUNCTION job.dependencies_exist(ids bigint[]) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    missing bigint;
BEGIN
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
