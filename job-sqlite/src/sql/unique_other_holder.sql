-- An active job other than dead letter ?1 of its kind that holds its unique key (the rows of
-- job_jobs_unique_idx): what keeps the dead letter from going back. The kind and key are read
-- from the dead letter's row, byte for byte (what a listing shows may have lost bytes that
-- are not UTF-8).
SELECT a.id
FROM job_jobs d
JOIN job_jobs a ON a.kind = d.kind AND a.unique_key = d.unique_key AND a.id <> d.id
WHERE d.id = ?1 AND (
    a.unique_scope = 'pruned'
    OR (a.unique_scope = 'finished'
        AND a.state IN ('scheduled', 'available', 'running', 'retryable'))
    OR (a.unique_scope = 'started'
        AND a.state IN ('scheduled', 'available', 'retryable')))
LIMIT 1
