-- Deletes up to ?3 completed jobs finished before ?1 and cancelled jobs finished before ?2
-- (never discarded ones), oldest first. Steps go with their job (ON DELETE CASCADE). Each
-- state is read through its own index (migration 0011), up to the batch: dead letters are
-- never read.
DELETE FROM job_jobs
WHERE id IN (
    SELECT id FROM (
        SELECT id, finalized_at FROM (
            SELECT id, finalized_at FROM job_jobs
            WHERE state = 'completed' AND finalized_at < ?1
            ORDER BY finalized_at
            LIMIT ?3
        )
        UNION ALL
        SELECT id, finalized_at FROM (
            SELECT id, finalized_at FROM job_jobs
            WHERE state = 'cancelled' AND finalized_at < ?2
            ORDER BY finalized_at
            LIMIT ?3
        )
    )
    ORDER BY finalized_at
    LIMIT ?3
)
