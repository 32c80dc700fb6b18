-- Picks up to ?3 completed jobs finished before ?1 and cancelled jobs finished (and due)
-- before ?2 (never discarded ones), oldest first, with the bytes deleting each frees: its
-- payload, result and error history and its steps' outputs, read from the rows' headers
-- (octet_length reads no overflow page). The store deletes a prefix of them of at most
-- PRUNE_BYTES (prune_ids.sql): SQLite walks every overflow page it frees, so 1,000 jobs of
-- 1 MiB held the file's write lock about a second in one batch.
-- Each state is read through its own index (migration 0011), up to the batch: dead letters are
-- never read.
SELECT p.id,
       octet_length(j.payload) + coalesce(octet_length(j.result), 0)
           + octet_length(j.errors)
           + coalesce((SELECT sum(octet_length(s.output)) FROM job_steps s
                       WHERE s.job_id = p.id), 0) AS bytes
FROM (
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
    ORDER BY finalized_at
    LIMIT ?3
) p
JOIN job_jobs j ON j.id = p.id
ORDER BY p.finalized_at, p.id
