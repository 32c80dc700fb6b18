-- Deletes the dead letters of dead_letters.sql (at most $9 discarded jobs matching the filter
-- $1..$8, $10, skipping rows someone holds). Returns the ids deleted.
DELETE FROM job.jobs
WHERE id IN (
    SELECT j.id
-- @dead_letters
)
RETURNING id
