-- The database-derived gauges, cheap on millions of rows: every part reads only the partial
-- index that holds its rows, and the oldest due job of each queue is found by index probes.
--   'jobs':  waiting jobs per queue and state, running jobs per queue (jobs_rescue_idx), dead
--            letters per queue (jobs_discarded_idx). Completed and cancelled jobs are not
--            counted (job_finished_total counts them as they finish). The waiting count reads
--            every waiting row (state is not in jobs_claim_idx); on a million rows with 280,000
--            waiting it is 150-250 ms, the whole statement 200-300 ms (README, Observability).
--   'oldest': per queue with waiting jobs, seconds since the oldest due one became due (0 when
--            none is due): a loose scan of jobs_claim_idx for the queues, then per queue and
--            priority the first due entry.
--   'dead':  dead letters per queue and kind, with the kind's owner (job.kind_owners).
-- Columns: section, queue, state or kind, owner, n (count or seconds).
WITH RECURSIVE queues AS (
    (SELECT j.queue FROM job.jobs j
     WHERE j.state IN ('scheduled', 'available', 'retryable')
     ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM job.jobs j
            WHERE j.state IN ('scheduled', 'available', 'retryable') AND j.queue > q.queue
            ORDER BY j.queue LIMIT 1)
    FROM queues q
    WHERE q.queue IS NOT NULL
), priorities AS (
    -- Per queue, each priority that has waiting jobs (a loose scan within the queue).
    SELECT q.queue, p.priority
    FROM queues q
    CROSS JOIN LATERAL (
        WITH RECURSIVE p AS (
            (SELECT j.priority FROM job.jobs j
             WHERE j.queue = q.queue AND j.state IN ('scheduled', 'available', 'retryable')
             ORDER BY j.priority LIMIT 1)
            UNION ALL
            SELECT (SELECT j.priority FROM job.jobs j
                    WHERE j.queue = q.queue
                      AND j.state IN ('scheduled', 'available', 'retryable')
                      AND j.priority > p.priority
                    ORDER BY j.priority LIMIT 1)
            FROM p
            WHERE p.priority IS NOT NULL
        )
        SELECT p.priority FROM p WHERE p.priority IS NOT NULL
    ) p
    WHERE q.queue IS NOT NULL
), oldest AS (
    SELECT pr.queue,
           min((SELECT j.run_at FROM job.jobs j
                WHERE j.queue = pr.queue AND j.priority = pr.priority
                  AND j.state IN ('scheduled', 'available', 'retryable')
                ORDER BY j.run_at LIMIT 1)) AS run_at
    FROM priorities pr
    GROUP BY pr.queue
), dead AS MATERIALIZED (
    -- Dead letters per queue and kind (jobs_discarded_idx), read once for both sections.
    SELECT j.queue, j.kind, count(*)::double precision AS n
    FROM job.jobs j
    WHERE j.state = 'discarded'
    GROUP BY j.queue, j.kind
)
SELECT 'jobs' AS section, j.queue, j.state::text AS name, NULL::text AS owner,
       count(*)::double precision AS n
FROM job.jobs j
WHERE j.state IN ('scheduled', 'available', 'retryable')
GROUP BY j.queue, j.state
UNION ALL
SELECT 'jobs', j.queue, 'running', NULL, count(*)
FROM job.jobs j
WHERE j.locked_until IS NOT NULL
GROUP BY j.queue
UNION ALL
SELECT 'jobs', d.queue, 'discarded', NULL, sum(d.n)
FROM dead d
GROUP BY d.queue
UNION ALL
SELECT 'oldest', o.queue, NULL, NULL,
       greatest(0, extract(epoch FROM now() - o.run_at))::double precision
FROM oldest o
UNION ALL
SELECT 'dead', d.queue, d.kind, (SELECT o.owner FROM job.kind_owners o WHERE o.kind = d.kind),
       d.n
FROM dead d
