-- How long, in milliseconds, the oldest due waiting job has been due, filtered as
-- stats_counts.sql; null when none is due.
SELECT (extract(epoch FROM now() - min(j.run_at)) * 1000)::bigint
FROM job.jobs j
WHERE j.state IN ('available', 'scheduled', 'retryable') AND j.run_at <= now()
  AND
-- @stats_filter
