-- The queues at a glance, within the tenant scope $1 (null: every tenant): per queue, the jobs
-- waiting (by state, with how long the oldest due one has been due), running, reported stuck,
-- the dead letters, and the jobs finished in the last $3 seconds (by state). Each part reads
-- at most $2 rows (waiting: at most $2 per queue and kind of state, 10 x $2 in all: `budget`),
-- whatever the tenant (`read` rows say how many), each through the partial index
-- that holds only its rows (jobs_claim_idx for available jobs, jobs_due_idx for scheduled and
-- retryable ones, jobs_rescue_idx, jobs_discarded_idx; the recently finished jobs through
-- jobs_completed_idx, jobs_cancelled_idx and jobs_discarded_idx, merged), in that index's order
-- so that the plan is a bounded index scan: a part that reaches $2 rows is a lower bound (the
-- caller marks it), and no part reads the table. The waiting parts look at the first $4 queues
-- by name at most (of each index), so that many queues cost $4 probes, not one per queue; a row
-- of section 'capped' says there were more.
WITH RECURSIVE available_queues AS (
    -- The queues that have available jobs, one index probe each (a loose scan of
    -- jobs_claim_idx).
    (SELECT j.queue, 1 AS n FROM job.jobs j
     WHERE j.state = 'available'
     ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM job.jobs j
            WHERE j.state = 'available' AND j.queue > q.queue
            ORDER BY j.queue LIMIT 1), q.n + 1
    FROM available_queues q
    WHERE q.queue IS NOT NULL AND q.n <= $4::integer
), later_queues AS (
    -- The queues that have scheduled or retryable jobs (a loose scan of jobs_due_idx).
    (SELECT j.queue, 1 AS n FROM job.jobs j
     WHERE j.state IN ('scheduled', 'retryable')
     ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM job.jobs j
            WHERE j.state IN ('scheduled', 'retryable') AND j.queue > q.queue
            ORDER BY j.queue LIMIT 1), q.n + 1
    FROM later_queues q
    WHERE q.queue IS NOT NULL AND q.n <= $4::integer
), budget AS (
    -- The rows each waiting part reads per queue: at most $2, and at most 10 x $2 over all the
    -- queues of the part, so that many queues of long backlogs cost 10 x $2 rows, not $2 per
    -- queue (a review: 100 queues of 10,000 waiting, 2.4 s; 250 of them passed the page's bound).
    SELECT greatest(1, least($2::integer,
                             $2::bigint * 10 / greatest(1, (SELECT count(*) FROM available_queues q
                                                            WHERE q.queue IS NOT NULL
                                                              AND q.n <= $4::integer))))::integer
               AS available,
           greatest(1, least($2::integer,
                             $2::bigint * 10 / greatest(1, (SELECT count(*) FROM later_queues q
                                                            WHERE q.queue IS NOT NULL
                                                              AND q.n <= $4::integer))))::integer
               AS later
), waiting AS (
    -- Per queue, its first available jobs (in jobs_claim_idx's order) and its first scheduled
    -- and retryable ones (the soonest due first), as many as the budget says, whatever their
    -- tenant: a tenant's share is counted among the rows read (the tenant filter on the index's
    -- rows read another tenant's backlog whole before it found the LIMIT's rows).
    SELECT q.queue, 'available' AS part, w.state, w.run_at, w.tenant
    FROM available_queues q
    CROSS JOIN budget b
    CROSS JOIN LATERAL (
        SELECT j.state::text AS state, j.run_at, j.tenant
        FROM job.jobs j
        WHERE j.queue = q.queue AND j.state = 'available'
        ORDER BY j.kind, j.priority, j.run_at, j.id
        LIMIT b.available
    ) w
    WHERE q.queue IS NOT NULL AND q.n <= $4::integer
    UNION ALL
    SELECT q.queue, 'later', w.state, w.run_at, w.tenant
    FROM later_queues q
    CROSS JOIN budget b
    CROSS JOIN LATERAL (
        SELECT j.state::text AS state, j.run_at, j.tenant
        FROM job.jobs j
        -- The queue as a range and in the order, not `j.queue = q.queue ORDER BY j.run_at`:
        -- with the equality the planner took the order for run_at's alone and read it
        -- through jobs_staging_idx (run_at), past every other queue's scheduled jobs due
        -- sooner (a plan audit, 300,000 scheduled jobs of one queue: 280 ms a page, 70 ms
        -- this way, through jobs_due_idx).
        WHERE j.queue >= q.queue AND j.queue <= q.queue
          AND j.state IN ('scheduled', 'retryable')
        ORDER BY j.queue, j.run_at
        LIMIT b.later
    ) w
    WHERE q.queue IS NOT NULL AND q.n <= $4::integer
), running AS (
    -- This part and the next two read their first $2 rows whatever the tenant, and count the
    -- tenant's among them, for the same reason.
    SELECT j.queue, j.stuck_since, j.tenant
    FROM job.jobs j
    WHERE j.locked_until IS NOT NULL
    ORDER BY j.kind, j.locked_until
    LIMIT $2::integer
), dead AS (
    SELECT j.queue, j.tenant
    FROM job.jobs j
    WHERE j.state = 'discarded'
    ORDER BY j.finalized_at, j.id
    LIMIT $2::integer
), recent AS (
    -- The first $2 finished in the window, whatever their state: each state's first $2 from its
    -- own index (migration 0017), merged.
    SELECT r.queue, r.state, r.tenant
    FROM ((SELECT j.queue, j.state::text AS state, j.finalized_at, j.tenant
           FROM job.jobs j
           WHERE j.state = 'completed'
             AND j.finalized_at >= now() - make_interval(secs => $3::double precision)
           ORDER BY j.finalized_at
           LIMIT $2::integer)
          UNION ALL
          (SELECT j.queue, j.state::text, j.finalized_at, j.tenant
           FROM job.jobs j
           WHERE j.state = 'cancelled'
             AND j.finalized_at >= now() - make_interval(secs => $3::double precision)
           ORDER BY j.finalized_at
           LIMIT $2::integer)
          UNION ALL
          (SELECT j.queue, j.state::text, j.finalized_at, j.tenant
           FROM job.jobs j
           WHERE j.state = 'discarded'
             AND j.finalized_at >= now() - make_interval(secs => $3::double precision)
           ORDER BY j.finalized_at
           LIMIT $2::integer)) r
    ORDER BY r.finalized_at
    LIMIT $2::integer
)
SELECT 'now' AS section, w.queue, w.state, count(*) AS n,
       (extract(epoch FROM now() - min(w.run_at) FILTER (WHERE w.run_at <= now())) * 1000)::bigint AS oldest_ms
FROM waiting w WHERE $1::text IS NULL OR w.tenant = $1::text GROUP BY w.queue, w.state
UNION ALL
SELECT 'now', r.queue, 'running', count(*), NULL FROM running r
WHERE $1::text IS NULL OR r.tenant = $1::text GROUP BY r.queue
UNION ALL
SELECT 'now', r.queue, 'stuck', count(*), NULL FROM running r
WHERE r.stuck_since IS NOT NULL AND ($1::text IS NULL OR r.tenant = $1::text) GROUP BY r.queue
UNION ALL
SELECT 'now', d.queue, 'discarded', count(*), NULL FROM dead d
WHERE $1::text IS NULL OR d.tenant = $1::text GROUP BY d.queue
UNION ALL
SELECT 'recent', r.queue, r.state, count(*), NULL FROM recent r
WHERE $1::text IS NULL OR r.tenant = $1::text GROUP BY r.queue, r.state
UNION ALL
-- What each part read, whatever the tenant: a part (of a queue, for the waiting ones) that read
-- its whole budget has counts that are lower bounds.
SELECT 'read', w.queue, w.part, count(*), NULL FROM waiting w GROUP BY w.queue, w.part
UNION ALL
SELECT 'read', '', 'running', count(*), NULL FROM running
UNION ALL
SELECT 'read', '', 'discarded', count(*), NULL FROM dead
UNION ALL
SELECT 'read', '', 'recent', count(*), NULL FROM recent
UNION ALL
SELECT 'budget', '', 'available', b.available, NULL FROM budget b
UNION ALL
SELECT 'budget', '', 'later', b.later, NULL FROM budget b
UNION ALL
SELECT 'capped', '', 'queues', 1, NULL
WHERE EXISTS (SELECT 1 FROM available_queues q WHERE q.queue IS NOT NULL AND q.n > $4::integer)
   OR EXISTS (SELECT 1 FROM later_queues q WHERE q.queue IS NOT NULL AND q.n > $4::integer)
ORDER BY 2, 1, 3
