-- Deletes up to ?3 completed jobs finished before ?1 and cancelled jobs finished before ?2
-- (never discarded ones), oldest first. Steps go with their job (ON DELETE CASCADE).
DELETE FROM job_jobs
WHERE id IN (
    SELECT id FROM job_jobs
    WHERE finalized_at IS NOT NULL
      AND ((state = 'completed' AND finalized_at < ?1)
        OR (state = 'cancelled' AND finalized_at < ?2))
    ORDER BY finalized_at
    LIMIT ?3
)
