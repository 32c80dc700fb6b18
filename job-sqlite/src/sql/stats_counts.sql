-- Counts jobs per queue and state: ?1 kind, ?2 queue, ?3 tenant, ?4 a tag (null: any).
SELECT j.queue, j.state, count(*) AS n
FROM job_jobs j
WHERE (?1 IS NULL OR j.kind = ?1)
  AND (?2 IS NULL OR j.queue = ?2)
  AND (?3 IS NULL OR j.tenant = ?3)
  AND (?4 IS NULL OR EXISTS (SELECT 1 FROM json_each(j.tags) t WHERE t.value = ?4))
GROUP BY j.queue, j.state
