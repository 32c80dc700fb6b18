-- Due waiting jobs of kind ?2 on queue ?1, at most payload version ?5 (the newest its worker
-- decodes), in claim order (priority, run time, id), at most ?4; ?3 is the database's now.
-- Skipped: jobs past their deadline (the pruner discards them) and jobs whose cancellation was
-- requested (the pruner cancels them), and rows whose next attempt or counts a worker could
-- not hold (written raw before migration 0006, or at `attempt` 2147483646). Runs inside the
-- claim's immediate transaction, once per kind the claim takes (lease.rs merges the picks in
-- the same order): no other writer can take these rows before claim_take.sql does.
--
-- Its cost grows neither with the jobs scheduled later nor with other kinds' jobs.
-- job_jobs_claim_kind_idx is (queue, kind, priority, run_at, id) over the waiting rows
-- (migration 0019): the rows of a kind this claim does not take (paused, at its cap, run by
-- no worker of the process) are never read. Read in the claim's order from `queue = ?1 AND
-- kind = ?2` alone, a claim that found fewer due jobs than it asked for (every idle poll)
-- would walk every waiting row of the kind under the write lock (300,000 scheduled for later:
-- 20 ms a claim; 1,000,000: 80 ms). So the kind's distinct priorities on the queue are found
-- first, each one seek on the index (`priorities`, the skip-scan that SQLite plans only with
-- ANALYZE's statistics, written out), and the rows read with `priority` IN those and `run_at
-- <= ?3`: a range of the index per priority, still in the claim's order (the IN list is read in
-- ascending order), so it stops after ?4 rows and never reads a row due later. The plan is
-- checked by lease.rs's tests, with and without statistics.
WITH RECURSIVE priorities(priority) AS (
    SELECT min(priority) FROM job_jobs
    WHERE queue = ?1 AND kind = ?2 AND state IN ('available', 'scheduled', 'retryable')
    UNION ALL
    SELECT (SELECT min(w.priority) FROM job_jobs w
            WHERE w.queue = ?1 AND w.kind = ?2
              AND w.state IN ('available', 'scheduled', 'retryable')
              AND w.priority > p.priority)
    FROM priorities p
    WHERE p.priority IS NOT NULL
)
SELECT j.id, j.priority, j.run_at
FROM job_jobs j
WHERE j.state IN ('available', 'scheduled', 'retryable')
  AND j.queue = ?1
  AND j.kind = ?2
  AND j.priority IN (SELECT priority FROM priorities WHERE priority IS NOT NULL)
  AND j.run_at <= ?3
  AND j.payload_version <= ?5
  AND (j.deadline IS NULL OR j.deadline > ?3)
  AND j.cancel_requested = 0
  AND j.attempt < 2147483646
  AND j.max_attempts <= 2147483647
  AND j.snoozes <= 2147483647
ORDER BY j.priority, j.run_at, j.id
LIMIT ?4
