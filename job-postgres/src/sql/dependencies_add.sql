-- Records what jobs just inserted in this transaction wait for, and makes them `pending`
-- (migration 0013): edges ($1 dependent, $2 the job it waits for, $3 mode, in lockstep); $4
-- the jobs waited for that were not inserted with them, which must exist
-- (job.dependencies_exist raises a check_violation naming `depends_on`, and holds them until
-- this transaction ends, so that the pruner cannot delete them; called once, as a subquery,
-- since it is volatile, migration 0019). A job listed twice
-- keeps its first edge. Returns how many dependents it set pending.
WITH edges AS (
    INSERT INTO job.dependencies (job_id, depends_on, mode)
    SELECT e.job_id, e.depends_on, e.mode
    FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS e(job_id, depends_on, mode)
    WHERE (SELECT job.dependencies_exist($4::bigint[]))
    ON CONFLICT (job_id, depends_on) DO NOTHING
    RETURNING job_id
),
waiting AS (
    UPDATE job.jobs j
    SET state = 'pending'
    WHERE j.id IN (SELECT job_id FROM edges)
    RETURNING j.id
)
SELECT count(*) FROM waiting
