-- Counts jobs per queue and state, filtered by $1 kind, $2 queue, $3 tenant, $4 tag (null: any)
-- within the tenant scope $5 (null: every tenant).
SELECT j.queue, j.state::text AS state, count(*) AS n
FROM job.jobs j
WHERE ($1::text IS NULL OR j.kind = $1::text)
  AND ($2::text IS NULL OR j.queue = $2::text)
  AND ($3::text IS NULL OR j.tenant = $3::text)
  AND ($4::text IS NULL OR $4::text = ANY (j.tags))
  AND ($5::text IS NULL OR j.tenant = $5::text)
GROUP BY j.queue, j.state
ORDER BY j.queue, j.state
