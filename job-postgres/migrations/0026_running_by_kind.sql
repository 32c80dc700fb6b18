-- 0026 running jobs by kind: a claim of a kind with a concurrency limit counts that kind's
-- running jobs, not every running job. Append-only: change the schema in a new numbered file.
--
-- job.claim and claim_rated.sql count a limited kind's running rows to know its room. Through
-- jobs_rescue_idx (locked_until) that count read every running row of every kind: with
-- 300,000 jobs running (or held by prefetching workers, or with leases run out and not yet
-- rescued), a claim of a limited kind took 52-94 ms, on every claim, whatever it returned.
-- Keyed by kind first, the count is a range of the index holding that kind's running rows
-- only (about its limit): 2 rows read there, in under a millisecond.
--
-- The other readers of the index follow its new order: the rescuer walks the kinds that have
-- running rows (one index probe each) and takes each kind's expired leases, oldest first, up to
-- its batch (job.rescue_expired, below); the dashboard's overview counts running rows in index
-- order (inspect_overview.sql). What counts every running row (the reporter's gauges,
-- check_leases.sql) reads the same rows as before. A claim or a heartbeat writes one entry, as
-- before; the raw claim + finalize loop of job-bench measured no difference (4 alternating
-- pairs of 30,000-job drains, within this machine's noise).
--
-- Rebuilding the index locks writes to job.jobs while it builds (a migration runs in a
-- transaction, where CREATE INDEX CONCURRENTLY cannot); it holds running rows only, but the
-- build reads the table: on a large table, apply it when the queue is quiet.

DROP INDEX job.jobs_rescue_idx;

CREATE INDEX jobs_rescue_idx ON job.jobs (kind, locked_until)
    WHERE locked_until IS NOT NULL;

-- The rescuer's statement (formerly the text of sql/rescue_expired.sql, which now calls this).
-- Recovers up to in_limit expired leases (running and locked_until before the database's now),
-- and only those, skipping rows someone holds (a heartbeat renewing one right now). Attempts
-- exhausted: discarded; else retryable, the attempt counted, keeping its run_at: it was due when
-- it was claimed, so it is due now and keeps its place ahead of jobs that became due after it
-- (a rescued job does not queue behind the backlog). Appends a lease_expired error naming the
-- worker (through job.push_error), clears the lease and stuck_since, and wakes the queues it
-- refilled.
--
-- The expired leases are found per kind: a loose scan of jobs_rescue_idx lists the kinds that
-- have running rows (one probe each), and each kind's expired leases are read oldest first
-- until the batch is full. What a pass reads is the leases it takes plus one probe per kind,
-- however many leases are live.
--
-- Why a function: a kind's leases must be read in the index's order, so that the scan stops at
-- the batch. Given a kind's expired rows in a heap order the planner rates poorly, its custom
-- plan chose a bitmap scan of every expired row of the kind and a sort (5,102 rows read to
-- rescue 100 in tests/store_claim.rs). `enable_bitmapscan = off` for this statement only
-- leaves the ordered index scan as the plan, whatever the statistics. Like job.claim, it runs
-- with its caller's privileges (SECURITY INVOKER), EXECUTE left to PUBLIC, search_path pinned,
-- no JIT (migration 0024's reasons).
CREATE FUNCTION job.rescue_expired(in_limit integer)
RETURNS TABLE (retried bigint, discarded bigint, queues_woken bigint)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET enable_bitmapscan = off
SET jit = off
AS $rescue$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH RECURSIVE kinds AS (
        (SELECT j.kind FROM job.jobs j
         WHERE j.locked_until IS NOT NULL
         ORDER BY j.kind LIMIT 1)
        UNION ALL
        SELECT (SELECT j.kind FROM job.jobs j
                WHERE j.locked_until IS NOT NULL AND j.kind > k.kind
                ORDER BY j.kind LIMIT 1)
        FROM kinds k
        WHERE k.kind IS NOT NULL
    ),
    expired AS (
        SELECT e.id
        FROM kinds k
        CROSS JOIN LATERAL (
            SELECT j.id
            FROM job.jobs j
            WHERE j.kind = k.kind AND j.locked_until < now() AND j.state = 'running'
            ORDER BY j.locked_until
            LIMIT in_limit
            FOR NO KEY UPDATE SKIP LOCKED
        ) e
        WHERE k.kind IS NOT NULL
        LIMIT in_limit
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
    FROM rescued;
END
$rescue$;
