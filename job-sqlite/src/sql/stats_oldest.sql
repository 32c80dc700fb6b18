-- How long, in microseconds before ?5 (the database's now), the oldest due waiting job has been
-- due, filtered as stats_counts.sql; null when none is due.
SELECT ?5 - min(j.run_at)
FROM job_jobs j
WHERE j.state IN ('available', 'scheduled', 'retryable') AND j.run_at <= ?5
  AND (?1 IS NULL OR j.kind = ?1)
  AND (?2 IS NULL OR j.queue = ?2)
  AND (?3 IS NULL OR j.tenant = ?3)
  AND (?4 IS NULL OR EXISTS (SELECT 1 FROM json_each(j.tags) t WHERE t.value = ?4))
