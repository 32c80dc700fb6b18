-- Reads one job by id, unless it belongs to another tenant than ?2 (null: any).
SELECT id, kind, queue, priority, state, payload, payload_version, attempt, max_attempts,
       run_at, lock_token, locked_until, locked_by, cancel_requested, errors, created_at,
       finalized_at, deadline, unique_key, tags, tenant, stuck_since, result
FROM job_jobs
WHERE id = ?1 AND (?2 IS NULL OR tenant = ?2)
