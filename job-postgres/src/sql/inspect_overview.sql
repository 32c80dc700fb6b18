-- The queues at a glance, within the tenant scope $1 (null: every tenant): per queue, the jobs
-- waiting (by state, with how long the oldest due one has been due), running, reported stuck,
-- the dead letters, and the jobs finished in the last $3 seconds (by state). Each part reads
-- at most $2 rows, each through the partial index that holds only its rows (jobs_claim_idx,
-- jobs_rescue_idx, jobs_discarded_idx, jobs_finalized_idx), in that index's order so that the
-- plan is a bounded index scan: a part that reaches $2 rows is a lower bound (the caller
-- marks it), and no part reads the table.
WITH waiting AS (
    SELECT j.queue, j.state::text AS state, j.run_at
    FROM job.jobs j
    WHERE j.state IN ('scheduled', 'available', 'retryable')
      AND ($1::text IS NULL OR j.tenant = $1::text)
    ORDER BY j.queue, j.priority, j.run_at, j.id
    LIMIT $2::integer
), running AS (
    SELECT j.queue, j.stuck_since, j.locked_until
    FROM job.jobs j
    WHERE j.locked_until IS NOT NULL
      AND ($1::text IS NULL OR j.tenant = $1::text)
    ORDER BY j.locked_until
    LIMIT $2::integer
), dead AS (
    SELECT j.queue
    FROM job.jobs j
    WHERE j.state = 'discarded'
      AND ($1::text IS NULL OR j.tenant = $1::text)
    ORDER BY j.finalized_at, j.id
    LIMIT $2::integer
), recent AS (
    SELECT j.queue, j.state::text AS state
    FROM job.jobs j
    WHERE j.finalized_at >= now() - make_interval(secs => $3::double precision)
      AND ($1::text IS NULL OR j.tenant = $1::text)
    ORDER BY j.finalized_at
    LIMIT $2::integer
)
SELECT 'now' AS section, w.queue, w.state, count(*) AS n,
       (extract(epoch FROM now() - min(w.run_at) FILTER (WHERE w.run_at <= now())) * 1000)::bigint AS oldest_ms
FROM waiting w GROUP BY w.queue, w.state
UNION ALL
SELECT 'now', r.queue, 'running', count(*), NULL FROM running r GROUP BY r.queue
UNION ALL
SELECT 'now', r.queue, 'stuck', count(*), NULL FROM running r WHERE r.stuck_since IS NOT NULL GROUP BY r.queue
UNION ALL
SELECT 'now', d.queue, 'discarded', count(*), NULL FROM dead d GROUP BY d.queue
UNION ALL
SELECT 'recent', r.queue, r.state, count(*), NULL FROM recent r GROUP BY r.queue, r.state
ORDER BY 2, 1, 3
