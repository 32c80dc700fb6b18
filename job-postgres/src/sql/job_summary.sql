-- A fragment, not a statement: the summary a listing shows of a job `j` (summary.rs decodes
-- it), spliced (sql.rs) into inspect_page.sql and list_summary.sql at their `@job_summary`
-- marker line. Not the row: no payload, result, progress or error history; of the history
-- only the last entry's class and message, cut to $11 and $12 characters; an entry that is not
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
