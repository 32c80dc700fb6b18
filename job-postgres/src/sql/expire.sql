-- Ends up to $1 waiting jobs of each sort that must not run, skipping rows someone holds:
-- past their deadline → discarded with an `expired` error naming the deadline (a `pending`
-- job too, waiting for its dependencies or its ordering key: migration 0035); cancellation
-- requested (while running, then retried, snoozed, rescued or released) → cancelled. Each
-- sort is found through its own partial index. Never touches a running job.
WITH late AS (
    SELECT id FROM job.jobs
    WHERE deadline <= now() AND deadline IS NOT NULL
      AND state IN ('available', 'scheduled', 'retryable')
    ORDER BY deadline
    LIMIT $1::integer
    FOR NO KEY UPDATE SKIP LOCKED
),
late_pending AS (
    SELECT id FROM job.jobs
    WHERE deadline <= now() AND deadline IS NOT NULL
      AND state = 'pending'
    ORDER BY deadline
    LIMIT $1::integer
    FOR NO KEY UPDATE SKIP LOCKED
),
unwanted AS (
    SELECT id FROM job.jobs
    WHERE cancel_requested AND state IN ('available', 'scheduled', 'retryable')
    LIMIT $1::integer
    FOR NO KEY UPDATE SKIP LOCKED
),
ended AS (
    UPDATE job.jobs j
    SET state        = CASE WHEN j.cancel_requested THEN 'cancelled'
                            ELSE 'discarded' END::job.job_state,
        finalized_at = now(),
        -- job.push_error keeps the history bounded.
        errors       = job.push_error(j.errors, jsonb_build_object(
                           'attempt', j.attempt,
                           'at', now(),
                           'class', CASE WHEN j.cancel_requested THEN 'cancelled'
                                         ELSE 'expired' END,
                           'message', CASE WHEN j.cancel_requested
                                           THEN 'cancellation was requested while it ran'
                                           ELSE format('deadline %s passed before the job started',
                                                       to_char(j.deadline AT TIME ZONE 'UTC',
                                                               'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
                                      END))
    FROM (SELECT id FROM late UNION SELECT id FROM late_pending UNION SELECT id FROM unwanted) e
    WHERE j.id = e.id AND j.state IN ('pending', 'available', 'scheduled', 'retryable')
    RETURNING j.state
)
SELECT count(*) FILTER (WHERE state = 'discarded') AS discarded,
       count(*) FILTER (WHERE state = 'cancelled') AS cancelled
FROM ended
