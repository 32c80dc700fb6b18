-- Lists jobs matching a JobFilter, oldest (lowest id) first, at most ?9: ?1 ids (a JSON array;
-- empty: any), ?2 states (a JSON array; empty: any), ?3 kind, ?4 queue, ?5 tenant, ?6 a tag the
-- job carries, ?7..?8 the finalized_at range [from, to); null: any. Redrive and purge pick
-- their dead letters with dead_letters.sql and dead_letters_by_id.sql instead, which read them
-- through their index.
SELECT id, kind, queue, priority, state, payload, payload_version, attempt, max_attempts,
       run_at, lock_token, locked_until, locked_by, cancel_requested, errors, created_at,
       finalized_at, deadline, unique_key, tags, tenant, stuck_since, result
FROM job_jobs j
WHERE (?1 = '[]' OR j.id IN (SELECT value FROM json_each(?1)))
  AND (?2 = '[]' OR j.state IN (SELECT value FROM json_each(?2)))
  AND (?3 IS NULL OR j.kind = ?3)
  AND (?4 IS NULL OR j.queue = ?4)
  AND (?5 IS NULL OR j.tenant = ?5)
  AND (?6 IS NULL OR EXISTS (SELECT 1 FROM json_each(j.tags) t WHERE t.value = ?6))
  AND (?7 IS NULL OR j.finalized_at >= ?7)
  AND (?8 IS NULL OR j.finalized_at < ?8)
ORDER BY j.id
LIMIT ?9
