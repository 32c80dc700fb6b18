-- Counts running jobs whose execution a worker reports stuck, filtered as stats_counts.sql.
SELECT count(*)
FROM job_jobs j
WHERE j.locked_until IS NOT NULL AND j.stuck_since IS NOT NULL
  AND (?1 IS NULL OR j.kind = ?1)
  AND (?2 IS NULL OR j.queue = ?2)
  AND (?3 IS NULL OR j.tenant = ?3)
  AND (?4 IS NULL OR EXISTS (SELECT 1 FROM json_each(j.tags) t WHERE t.value = ?4))
