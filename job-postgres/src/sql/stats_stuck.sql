-- Counts running jobs whose execution a worker reports stuck, filtered as stats_filter.sql
-- says ($1..$5). A stuck job holds a lease, so the rescue index (running rows only) bounds the
-- scan.
SELECT count(*)
FROM job.jobs j
WHERE j.locked_until IS NOT NULL AND j.stuck_since IS NOT NULL
  AND
-- @stats_filter
