-- Deletes the dead letters of dead_letters.sql (at most $9 discarded jobs matching the filter
-- $1..$8, $10, skipping rows someone holds), and what they depended on (job.dependencies,
-- migration 0013), recording on the edges still pointing at them that they did not satisfy
-- them (@verdicts). Returns the ids deleted.
WITH gone AS (
    DELETE FROM job.jobs
    WHERE id IN (
        SELECT j.id
-- @dead_letters
    )
    RETURNING id, state
),
edges AS (
    DELETE FROM job.dependencies d WHERE d.job_id IN (SELECT id FROM gone)
),
-- @verdicts
SELECT id FROM gone
