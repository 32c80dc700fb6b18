-- Lists what a listing shows of the jobs matching a filter (job_filter.sql: $1..$8, $10),
-- oldest (lowest id) first, at most $9: inspect_page.sql's summary, not the row (no payload,
-- result, progress or error history; of the history only the last entry's class and message,
-- cut here to $11 and $12 characters). What `job list` prints and `job purge` asks about:
-- read whole, 1,000 dead letters of 1 MiB payloads took gigabytes of the operator's memory.
SELECT j.id, j.kind, j.queue, j.priority, j.state::text AS state, j.attempt, j.max_attempts,
       j.run_at, j.created_at, j.finalized_at, j.tags, j.tenant, j.stuck_since,
       j.cancel_requested,
       l.entry IS NOT NULL AS has_error,
       CASE WHEN jsonb_typeof(l.entry -> 'class') = 'string'
             AND jsonb_typeof(l.entry -> 'message') = 'string'
            THEN left(l.entry ->> 'class', $11::integer) END AS error_class,
       CASE WHEN jsonb_typeof(l.entry -> 'class') = 'string'
             AND jsonb_typeof(l.entry -> 'message') = 'string'
            THEN left(l.entry ->> 'message', $12::integer) END AS error_message
FROM job.jobs j
CROSS JOIN LATERAL (SELECT j.errors -> -1 AS entry) l
WHERE
-- @job_filter
ORDER BY j.id
LIMIT $9::integer
