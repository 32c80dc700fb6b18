-- Due waiting jobs of queue ?1 whose kind is one of ?2 (a JSON array of {kind, version}),
-- each at most the newest payload version that kind's worker decodes, in claim order
-- (priority, run time, id), at most ?4; ?3 is the database's now. Skipped: jobs past their
-- deadline (the pruner discards them) and jobs whose cancellation was requested (the pruner
-- cancels them), and rows whose next attempt or counts a worker could not hold (written raw
-- before migration 0006, or at `attempt` 2147483646). Runs inside the claim's immediate transaction: no other writer can take
-- these rows before claim_take.sql does.
--
-- Its cost does not grow with the jobs scheduled later. job_jobs_claim_idx is (queue,
-- priority, run_at, id): read in the claim's order from `queue = ?1` alone, a claim that found
-- fewer due jobs than it asked for (every idle poll) walked every waiting row of the queue
-- under the write lock (300,000 scheduled for later: 20 ms a claim; 1,000,000: 80 ms). So the
-- queue's distinct priorities are found first, each one seek on the index (`priorities`, the
-- skip-scan that SQLite plans only with ANALYZE's statistics, written out), and the rows read
-- with `priority` IN those and `run_at <= ?3`: a range of the index per priority, still in the
-- claim's order (the IN list is read in ascending order), so it stops after ?4 rows and never
-- reads a row due later. The CROSS JOIN keeps the jobs the outer loop whatever statistics
-- there are (with them, the planner read the kinds first and sorted every due row). The plan
-- is checked by lease.rs's tests, with and without statistics.
WITH RECURSIVE priorities(priority) AS (
    SELECT min(priority) FROM job_jobs
    WHERE queue = ?1 AND state IN ('available', 'scheduled', 'retryable')
    UNION ALL
    SELECT (SELECT min(w.priority) FROM job_jobs w
            WHERE w.queue = ?1 AND w.state IN ('available', 'scheduled', 'retryable')
              AND w.priority > p.priority)
    FROM priorities p
    WHERE p.priority IS NOT NULL
)
SELECT j.id, j.kind, j.priority, j.run_at
FROM job_jobs j
CROSS JOIN (SELECT value ->> '$.kind' AS kind, value ->> '$.version' AS version
            FROM json_each(?2)) k
WHERE k.kind = j.kind
  AND j.state IN ('available', 'scheduled', 'retryable')
  AND j.queue = ?1
  AND j.priority IN (SELECT priority FROM priorities WHERE priority IS NOT NULL)
  AND j.run_at <= ?3
  AND j.payload_version <= k.version
  AND (j.deadline IS NULL OR j.deadline > ?3)
  AND j.cancel_requested = 0
  AND j.attempt < 2147483646
  AND j.max_attempts <= 2147483647
  AND j.snoozes <= 2147483647
ORDER BY j.priority, j.run_at, j.id
LIMIT ?4
