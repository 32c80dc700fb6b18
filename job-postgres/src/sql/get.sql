-- Reads one job by id.
SELECT id, kind, queue, priority, state::text AS state, payload, payload_version, attempt,
       max_attempts, run_at, lock_token, locked_until, locked_by, cancel_requested,
       errors, created_at, finalized_at
FROM job.jobs
WHERE id = $1::bigint
