-- Waiting jobs that must not run: up to ?2 past their deadline (before ?1, the database's
-- now), and up to ?2 whose cancellation was requested. Never a running job, nor one of ?3 (a
-- JSON array of ids: rows the database refused to write in an earlier pass, store.rs
-- `RefusedRows`).
SELECT id, attempt, errors, cancel_requested, deadline FROM (
    SELECT id, attempt, errors, cancel_requested, deadline FROM job_jobs
    WHERE deadline IS NOT NULL AND deadline <= ?1
      AND state IN ('available', 'scheduled', 'retryable')
      AND id NOT IN (SELECT value FROM json_each(?3))
    ORDER BY deadline
    LIMIT ?2
)
UNION
SELECT id, attempt, errors, cancel_requested, deadline FROM (
    SELECT id, attempt, errors, cancel_requested, deadline FROM job_jobs
    WHERE cancel_requested = 1 AND state IN ('available', 'scheduled', 'retryable')
      AND id NOT IN (SELECT value FROM json_each(?3))
    LIMIT ?2
)
