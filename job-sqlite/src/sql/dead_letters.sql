-- The dead letters (discarded jobs) redrive and purge act on, when the filter names no ids:
-- ?1 kind, ?2 queue, ?3 tenant, ?4 a tag the job carries, ?5..?6 the finalized_at range
-- [from, to); null: any. Lowest id first, at most ?7; the columns of job_filter.sql. Runs
-- inside their immediate transaction.
--
-- The state is written out: job_filter.sql's `state IN (SELECT value FROM json_each(?2))`
-- cannot use the partial index job_jobs_discarded_idx, so every row of the table was read
-- under the file's write lock (a million completed rows and 5 dead letters: 170-218 ms a
-- redrive); this reads the dead letters through it in id order and stops at the limit. The
-- plan is checked by admin.rs's tests, with and without statistics.
SELECT id, kind, queue, priority, state, payload, payload_version, attempt, max_attempts,
       run_at, lock_token, locked_until, locked_by, cancel_requested, errors, created_at,
       finalized_at, deadline, unique_key, tags, tenant, stuck_since, result
FROM job_jobs j
WHERE j.state = 'discarded'
  AND (?1 IS NULL OR j.kind = ?1)
  AND (?2 IS NULL OR j.queue = ?2)
  AND (?3 IS NULL OR j.tenant = ?3)
  AND (?4 IS NULL OR EXISTS (SELECT 1 FROM json_each(j.tags) t WHERE t.value = ?4))
  AND (?5 IS NULL OR j.finalized_at >= ?5)
  AND (?6 IS NULL OR j.finalized_at < ?6)
ORDER BY j.id
LIMIT ?7
