-- Due waiting jobs of queue ?1 whose kind is one of ?2 (a JSON array of {kind, version}),
-- each at most the newest payload version that kind's worker decodes, in claim order
-- (priority, run time, id), at most ?4; ?3 is the database's now. Skipped: jobs past their
-- deadline (the pruner discards them) and jobs whose cancellation was requested (the pruner
-- cancels them), and rows whose next attempt or counts a worker could not hold (written raw
-- before migration 0006, or at `attempt` 2147483646). Runs inside the claim's immediate transaction: no other writer can take
-- these rows before claim_take.sql does.
SELECT j.id, j.kind, j.priority, j.run_at
FROM job_jobs j
JOIN (SELECT value ->> '$.kind' AS kind, value ->> '$.version' AS version
      FROM json_each(?2)) k ON k.kind = j.kind
WHERE j.state IN ('available', 'scheduled', 'retryable')
  AND j.queue = ?1
  AND j.run_at <= ?3
  AND j.payload_version <= k.version
  AND (j.deadline IS NULL OR j.deadline > ?3)
  AND j.cancel_requested = 0
  AND j.attempt < 2147483646
  AND j.max_attempts <= 2147483647
  AND j.snoozes <= 2147483647
ORDER BY j.priority, j.run_at, j.id
LIMIT ?4
