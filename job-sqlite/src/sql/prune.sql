-- Deletes up to ?3 completed jobs finished before ?1 and cancelled jobs finished (and due)
-- before ?2 (never discarded ones), oldest first. Steps go with their job (ON DELETE CASCADE).
-- Each state is read through its own index (migration 0011), up to the batch: dead letters are
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
            -- A job cancelled before its time (a periodic job's next period) is kept until
            -- that time has passed by the retention too: its unique key (`UntilPruned`) is
            -- what keeps a scheduler from enqueueing the period again. Read in the order of
            -- the later of the two times (job_jobs_cancelled_idx), so that such rows are not
            -- walked by every pass.
            SELECT id, max(finalized_at, run_at) AS finalized_at FROM job_jobs
            WHERE state = 'cancelled' AND max(finalized_at, run_at) < ?2
            ORDER BY max(finalized_at, run_at)
            LIMIT ?3
        )
    )
    ORDER BY finalized_at
    LIMIT ?3
)
