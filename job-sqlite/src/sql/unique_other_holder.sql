-- An active job of kind ?1 other than ?3 that holds unique key ?2 (the rows of
-- job_jobs_unique_idx): what keeps a dead letter with that key from going back.
SELECT id
FROM job_jobs
WHERE kind = ?1 AND unique_key = ?2 AND id <> ?3 AND (
    unique_scope = 'pruned'
    OR (unique_scope = 'finished'
        AND state IN ('scheduled', 'available', 'running', 'retryable'))
    OR (unique_scope = 'started'
        AND state IN ('scheduled', 'available', 'retryable')))
LIMIT 1
