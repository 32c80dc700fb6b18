-- Inserts one job with a unique key through job.enqueue_unique (migration 0002), which decides
-- duplicates by the unique index jobs_unique_idx. Binds as enqueue.sql, then $13 the key,
-- $14 its scope, $15 whether to replace a waiting duplicate. Returns (id, outcome) with outcome
-- 'inserted', 'replaced' or 'duplicate'. $16: the W3C traceparent of the job inserted or
-- replaced (job.set_trace_context, after enqueue_unique within this statement), or null. $17:
-- the ordering key of a job inserted (job.set_ordering_key), or null. $18: the rate key of a
-- job inserted (job.set_rate_key, migration 0015), or null.
SELECT e.id, e.outcome
FROM (SELECT e.id, e.outcome,
             CASE WHEN $16::text IS NOT NULL AND e.outcome <> 'duplicate'
                  THEN job.set_trace_context(e.id, $16::text) END AS traced,
             CASE WHEN $17::text IS NOT NULL AND e.outcome = 'inserted'
                  THEN job.set_ordering_key(e.id, $17::text) END AS ordered,
             CASE WHEN $18::text IS NOT NULL AND e.outcome = 'inserted'
                  THEN job.set_rate_key(e.id, $18::text) END AS rated
      FROM job.enqueue_unique(
    $1::text, $2::text, $3::smallint, $4::text::jsonb, $5::integer, $6::integer,
    coalesce($7::timestamptz, now() + $8::bigint * interval '1 millisecond'),
    coalesce($9::timestamptz, now() + $10::bigint * interval '1 millisecond'),
    $13::text, $14::text, $15::boolean, $11::text[], $12::text
) e) e
WHERE e.traced IS NOT FALSE AND e.ordered IS NOT FALSE AND e.rated IS NOT FALSE
