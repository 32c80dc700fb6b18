-- Recovers up to $1 expired leases (running and locked_until before the database's now), and
-- only those, skipping rows someone holds (a heartbeat renewing one right now). Attempts
-- exhausted: discarded; else retryable, the attempt counted, keeping its run_at: it was due when
-- it was claimed, so it is due now and keeps its place ahead of jobs that became due after it
-- (a rescued job does not queue behind the backlog). Appends a lease_expired error naming the
-- worker (through job.push_error), clears the lease and stuck_since, and wakes the queues it
-- refilled.
WITH expired AS (
    SELECT id
    FROM job.jobs
    WHERE state = 'running' AND locked_until < now()
    ORDER BY locked_until
    LIMIT $1::integer
    FOR NO KEY UPDATE SKIP LOCKED
),
rescued AS (
    UPDATE job.jobs j
    SET state        = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded'
                            ELSE 'retryable' END::job.job_state,
        finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
        errors       = job.push_error(j.errors, jsonb_build_object(
                           'attempt', j.attempt,
                           'at', now(),
                           'class', 'lease_expired',
                           'message', format('lease of worker %s expired at %s',
                                             coalesce(j.locked_by, '(unknown)'), j.locked_until))),
        lock_token   = NULL,
        locked_until = NULL,
        locked_by    = NULL,
        stuck_since  = NULL
    -- By primary key: joined, the rows could be matched by a scan of every running row.
    WHERE j.id = ANY (ARRAY(SELECT expired.id FROM expired))
      AND j.state = 'running' AND j.locked_until < now()
    RETURNING j.state, j.queue
),
woken AS (
    SELECT pg_notify('job_insert', q.queue)
    FROM (SELECT DISTINCT queue FROM rescued WHERE state = 'retryable') q
)
SELECT count(*) FILTER (WHERE state = 'retryable') AS retried,
       count(*) FILTER (WHERE state = 'discarded') AS discarded,
       (SELECT count(*) FROM woken) AS queues_woken
FROM rescued
