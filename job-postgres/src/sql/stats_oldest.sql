-- How long, in milliseconds, the oldest due waiting job has been due, filtered as
-- stats_counts.sql; null when none is due.
SELECT (extract(epoch FROM now() - min(j.run_at)) * 1000)::bigint
FROM job.jobs j
WHERE j.state IN ('available', 'scheduled', 'retryable') AND j.run_at <= now()
  AND ($1::text IS NULL OR j.kind = $1::text)
  AND ($2::text IS NULL OR j.queue = $2::text)
  AND ($3::text IS NULL OR j.tenant = $3::text)
  AND ($4::text IS NULL OR $4::text = ANY (j.tags))
  AND ($5::text IS NULL OR j.tenant = $5::text)
