-- Lists the pauses in force (as pauses.sql) that a tenant's handle shows: those that hold back
-- or touch a job of the tenant $1, so that a tenant learns no queue or kind name that only
-- other tenants use (job.pauses records no tenant: a pause acts on every tenant's jobs).
-- A queue's pause is shown when a job of the tenant is among the queue's first $2 available
-- jobs (jobs_claim_idx, in its order), its first $2 scheduled and retryable ones (the soonest
-- due, jobs_due_idx) or the first $2 running jobs (jobs_rescue_idx, as the overview reads them);
-- a kind's when one is among the kind's first $2 available jobs (queue by queue in name order,
-- $2 in all, over the first $3 queues with available jobs: a loose scan of jobs_claim_idx) or
-- its first $2 running ones (jobs_rescue_idx). Each look reads at most $2 rows whatever their
-- tenant and stops at the tenant's first, as inspect_overview.sql does: a pause whose queue or
-- kind holds more than $2 of other tenants' jobs ahead of all of this tenant's is not shown, and
-- a kind's scheduled and retryable jobs (no index finds them by kind) show its pause once due.
WITH RECURSIVE available_queues AS (
    -- Read only as far as a kind's look needs it, and only when a kind is paused.
    (SELECT j.queue, 1 AS n FROM job.jobs j
     WHERE j.state = 'available'
     ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM job.jobs j
            WHERE j.state = 'available' AND j.queue > q.queue
            ORDER BY j.queue LIMIT 1), q.n + 1
    FROM available_queues q
    WHERE q.queue IS NOT NULL AND q.n < $3::integer
), running AS (
    SELECT j.queue, j.tenant
    FROM job.jobs j
    WHERE j.locked_until IS NOT NULL
    ORDER BY j.kind, j.locked_until
    LIMIT $2::integer
)
SELECT p.scope, p.name, p.paused_by, p.reason, p.paused_at, p.resume_at
FROM job.pauses p
WHERE (p.resume_at IS NULL OR p.resume_at > now())
  AND CASE p.scope
      WHEN 'queue' THEN
          EXISTS (SELECT 1
                  FROM (SELECT j.tenant FROM job.jobs j
                        WHERE j.state = 'available' AND j.queue = p.name
                        ORDER BY j.kind, j.priority, j.run_at, j.id
                        LIMIT $2::integer) s
                  WHERE s.tenant = $1::text)
          OR EXISTS (SELECT 1
                     -- A range and the queue in the order, as inspect_overview.sql reads
                     -- them: through jobs_due_idx, not past other queues' jobs.
                     FROM (SELECT j.tenant FROM job.jobs j
                           WHERE j.state IN ('scheduled', 'retryable')
                             AND j.queue >= p.name AND j.queue <= p.name
                           ORDER BY j.queue, j.run_at
                           LIMIT $2::integer) s
                     WHERE s.tenant = $1::text)
          OR EXISTS (SELECT 1 FROM running r WHERE r.queue = p.name AND r.tenant = $1::text)
      WHEN 'kind' THEN
          EXISTS (SELECT 1
                  FROM (SELECT a.tenant
                        FROM available_queues q
                        CROSS JOIN LATERAL (
                            SELECT j.tenant FROM job.jobs j
                            WHERE j.state = 'available' AND j.queue = q.queue AND j.kind = p.name
                            ORDER BY j.priority, j.run_at, j.id
                            LIMIT $2::integer
                        ) a
                        WHERE q.queue IS NOT NULL
                        LIMIT $2::integer) s
                  WHERE s.tenant = $1::text)
          OR EXISTS (SELECT 1
                     FROM (SELECT j.tenant FROM job.jobs j
                           WHERE j.locked_until IS NOT NULL AND j.kind = p.name
                           ORDER BY j.locked_until
                           LIMIT $2::integer) s
                     WHERE s.tenant = $1::text)
      ELSE false
  END
ORDER BY p.scope, p.name
