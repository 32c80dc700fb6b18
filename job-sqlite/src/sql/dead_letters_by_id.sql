-- The dead letters (discarded jobs) among ids ?1 (a JSON array) that redrive and purge act on:
-- ?2 kind, ?3 queue, ?4 tenant, ?5 a tag the job carries, ?6..?7 the finalized_at range
-- [from, to); null: any. Lowest id first, at most ?8; the columns of job_filter.sql. Runs
-- inside their immediate transaction.
--
-- Each id is looked up by its primary key (job_filter.sql's `?1 = '[]' OR j.id IN (...)`
-- cannot be: it read the whole table under the file's write lock), and the state is written
-- out. The plan is checked by admin.rs's tests, with and without statistics.
SELECT id, kind, queue, priority, state, payload, payload_version, attempt, max_attempts,
       run_at, lock_token, locked_until, locked_by, cancel_requested, errors, created_at,
       finalized_at, deadline, unique_key, tags, tenant, stuck_since, result
FROM job_jobs j
WHERE j.id IN (SELECT value FROM json_each(?1))
  AND j.state = 'discarded'
  AND (?2 IS NULL OR j.kind = ?2)
  AND (?3 IS NULL OR j.queue = ?3)
  AND (?4 IS NULL OR j.tenant = ?4)
  AND (?5 IS NULL OR EXISTS (SELECT 1 FROM json_each(j.tags) t WHERE t.value = ?5))
  AND (?6 IS NULL OR j.finalized_at >= ?6)
  AND (?7 IS NULL OR j.finalized_at < ?7)
ORDER BY j.id
LIMIT ?8
