-- Deletes the dead letters of dead_letters.sql (at most $9 discarded jobs matching the filter
-- $1..$8, $10, skipping rows someone holds), recording on the edges still pointing at them
-- that they did not satisfy them (@verdicts). What they depended on (job.dependencies,
-- migration 0013) and their steps go by job.jobs' delete trigger (migration 0057). Returns the
-- ids deleted.
WITH gone AS (
    DELETE FROM job.jobs
    WHERE id IN (
        SELECT j.id
-- @dead_letters
    )
    RETURNING id, state
),
-- @verdicts
SELECT id FROM gone
