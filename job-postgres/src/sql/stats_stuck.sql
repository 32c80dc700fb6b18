-- Counts running jobs whose execution a worker reports stuck, filtered as stats_counts.sql,
-- within the tenant scope $5 (null: every tenant). A stuck job holds a lease, so the rescue
-- index (running rows only) bounds the scan.
SELECT count(*)
FROM job.jobs j
WHERE j.locked_until IS NOT NULL AND j.stuck_since IS NOT NULL
  AND ($1::text IS NULL OR j.kind = $1::text)
  AND ($2::text IS NULL OR j.queue = $2::text)
  AND ($3::text IS NULL OR j.tenant = $3::text)
  AND ($4::text IS NULL OR $4::text = ANY (j.tags))
  AND ($5::text IS NULL OR j.tenant = $5::text)
