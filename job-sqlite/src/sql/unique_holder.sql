-- The active job of kind ?1 holding unique key ?2: the rows of job_jobs_unique_idx.
SELECT id
FROM job_jobs
WHERE kind = ?1 AND unique_key = ?2 AND (
    unique_scope = 'pruned'
    OR (unique_scope = 'finished'
        AND state IN ('scheduled', 'available', 'running', 'retryable'))
    OR (unique_scope = 'started'
        AND state IN ('scheduled', 'available', 'retryable')))
