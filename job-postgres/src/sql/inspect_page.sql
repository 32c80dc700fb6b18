-- One listing page, newest first: up to $9 jobs with ids in [$7, $8) (the window of
-- inspect_window.sql; $8 null: no upper bound) matching $1 states (empty: any), $2 kind,
-- $3 queue, $4 tenant, $5 a tag the job carries (null: any), $6 ids (empty: any), within the
-- tenant scope $10 (null: every tenant), which no filter widens. The id range bounds the rows
-- read by the primary key's range, whatever the filter.
--
-- The summary a listing shows, not the row: no payload, result, progress or error history
-- (a page of 1 MiB payloads once read 50 MiB to show 17 KB). Of the history only the last
-- entry's class and message, cut here to $11 and $12 characters; an entry that is not
-- {class, message} strings reads as unreadable (row.rs reads a whole history the same way).
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
WHERE j.id >= $7::bigint
  AND ($8::bigint IS NULL OR j.id < $8::bigint)
  AND (cardinality($1::text[]) = 0 OR j.state = ANY ($1::text[]::job.job_state[]))
  AND ($2::text IS NULL OR j.kind = $2::text)
  AND ($3::text IS NULL OR j.queue = $3::text)
  AND ($4::text IS NULL OR j.tenant = $4::text)
  AND ($5::text IS NULL OR $5::text = ANY (j.tags))
  AND (cardinality($6::bigint[]) = 0 OR j.id = ANY ($6::bigint[]))
  AND ($10::text IS NULL OR j.tenant = $10::text)
ORDER BY j.id DESC
LIMIT $9::integer
