-- Deletes up to $9 dead letters (discarded jobs) matching the filter of job_filter.sql
-- ($1..$8, $10), skipping
-- rows someone holds. Returns the ids deleted.
DELETE FROM job.jobs
WHERE id IN (
    SELECT j.id
    FROM job.jobs j
    WHERE j.state = 'discarded'
      AND
-- @job_filter
    ORDER BY j.id
    LIMIT $9::integer
    FOR UPDATE SKIP LOCKED
)
RETURNING id
