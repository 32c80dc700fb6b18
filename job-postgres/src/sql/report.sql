-- The database-derived gauges, cheap on millions of rows: every part reads only the partial
-- index that holds its rows, and finished jobs are never read.
--   'jobs':   available jobs per queue (an index-only scan of jobs_claim_idx), scheduled and
--             retryable jobs per queue (jobs_due_idx), running jobs per queue
--             (jobs_rescue_idx), dead letters per queue (jobs_discarded_idx). Completed and
--             cancelled jobs are not counted (job_finished_total counts them as they finish).
--   'oldest': per queue with waiting jobs, seconds since its oldest due job became due (0 when
--             none is due): the first entry of each (queue, kind, priority) group of
--             jobs_claim_idx and of each queue of jobs_due_idx, found by index probes (loose
--             scans), so its cost follows the number of groups, not of jobs.
--   'dead':   dead letters per queue and kind, with the kind's owner (job.kind_owners).
-- Columns: section, queue, name (state or kind), owner, n (count or seconds).
WITH RECURSIVE available_groups AS (
    -- The oldest available job of each (queue, kind, priority): one probe per group.
    (SELECT j.queue, j.kind, j.priority, j.run_at FROM job.jobs j
     WHERE j.state = 'available'
     ORDER BY j.queue, j.kind, j.priority, j.run_at LIMIT 1)
    UNION ALL
    SELECT n.queue, n.kind, n.priority, n.run_at
    FROM available_groups g
    CROSS JOIN LATERAL (
        SELECT j.queue, j.kind, j.priority, j.run_at FROM job.jobs j
        WHERE j.state = 'available'
          AND (j.queue, j.kind, j.priority) > (g.queue, g.kind, g.priority)
        ORDER BY j.queue, j.kind, j.priority, j.run_at LIMIT 1
    ) n
), waiting_queues AS (
    -- The earliest scheduled or retryable job of each queue: one probe per queue.
    (SELECT j.queue, j.run_at FROM job.jobs j
     WHERE j.state IN ('scheduled', 'retryable')
     ORDER BY j.queue, j.run_at LIMIT 1)
    UNION ALL
    SELECT n.queue, n.run_at
    FROM waiting_queues w
    CROSS JOIN LATERAL (
        SELECT j.queue, j.run_at FROM job.jobs j
        WHERE j.state IN ('scheduled', 'retryable') AND j.queue > w.queue
        ORDER BY j.queue, j.run_at LIMIT 1
    ) n
), oldest AS (
    SELECT o.queue, min(o.run_at) FILTER (WHERE o.run_at <= now()) AS run_at
    FROM (SELECT queue, run_at FROM available_groups
          UNION ALL
          SELECT queue, run_at FROM waiting_queues) o
    GROUP BY o.queue
), dead AS MATERIALIZED (
    -- Dead letters per queue and kind (jobs_discarded_idx), read once for both sections.
    SELECT j.queue, j.kind, count(*)::double precision AS n
    FROM job.jobs j
    WHERE j.state = 'discarded'
    GROUP BY j.queue, j.kind
)
SELECT 'jobs' AS section, j.queue, 'available' AS name, NULL::text AS owner,
       count(*)::double precision AS n
FROM job.jobs j
WHERE j.state = 'available'
GROUP BY j.queue
UNION ALL
SELECT 'jobs', j.queue, j.state::text, NULL, count(*)
FROM job.jobs j
WHERE j.state IN ('scheduled', 'retryable')
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
       coalesce(greatest(0, extract(epoch FROM now() - o.run_at)), 0)::double precision
FROM oldest o
UNION ALL
SELECT 'dead', d.queue, d.kind, (SELECT o.owner FROM job.kind_owners o WHERE o.kind = d.kind),
       d.n
FROM dead d
