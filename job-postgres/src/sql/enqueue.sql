-- Inserts one job without a unique key (those go through enqueue_unique.sql). `run_at` is $7
-- when given, else the database's now() plus $8 milliseconds; a job due later starts
-- `scheduled`, one due now `available`. The deadline likewise: $9, else now() plus $10
-- milliseconds when $10 is not null, else none. $13: the W3C traceparent, or null. $14: the
-- ordering key, or null (the trigger jobs_ordering_admit_insert makes the job pending when an
-- earlier job of its key is unfinished, migration 0012). $15: the rate key, or null.
WITH t AS (
    SELECT coalesce($7::timestamptz, now() + $8::bigint * interval '1 millisecond') AS run_at,
           coalesce($9::timestamptz, now() + $10::bigint * interval '1 millisecond') AS deadline
)
INSERT INTO job.jobs (kind, queue, priority, payload, payload_version, max_attempts, run_at, state,
                      deadline, tags, tenant, trace_context, ordering_key, rate_key)
SELECT $1::text, $2::text, $3::smallint, $4::text::jsonb, $5::integer, $6::integer, t.run_at,
       CASE WHEN t.run_at > now() THEN 'scheduled' ELSE 'available' END::job.job_state,
       t.deadline, $11::text[], $12::text, $13::text, $14::text, $15::text
FROM t
RETURNING id, NULL::text AS outcome
