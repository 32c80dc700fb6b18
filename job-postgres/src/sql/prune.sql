-- Deletes up to $3 completed jobs finished more than $1 milliseconds ago and cancelled jobs
-- finished more than $2 milliseconds ago (never discarded ones), oldest first, skipping rows
-- someone holds, and what those jobs depended on (job.dependencies, migration 0013). A job
-- that an unresolved edge points at is kept until the stager has resolved it
-- (dependencies_open_idx): deleted, it would read as a dependency that did not complete, and
-- its dependent would be discarded. Returns how many jobs.
WITH gone AS (
    DELETE FROM job.jobs
    WHERE id IN (
        SELECT id
        FROM job.jobs
        WHERE finalized_at IS NOT NULL
          AND ((state = 'completed'
                AND finalized_at < now() - $1::bigint * interval '1 millisecond')
            OR (state = 'cancelled'
                AND finalized_at < now() - $2::bigint * interval '1 millisecond'))
          AND NOT EXISTS (SELECT 1 FROM job.dependencies d
                          WHERE d.depends_on = job.jobs.id AND NOT d.resolved)
        ORDER BY finalized_at
        LIMIT $3::integer
        FOR UPDATE SKIP LOCKED
    )
    RETURNING id
),
edges AS (
    DELETE FROM job.dependencies d WHERE d.job_id IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone
