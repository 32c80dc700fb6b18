-- Inserts one job. `run_at` is $7 when given, else the database's now() plus $8 milliseconds;
-- a job due later starts `scheduled`, one due now `available`.
WITH t AS (
    SELECT coalesce($7::timestamptz, now() + $8::bigint * interval '1 millisecond') AS run_at
)
INSERT INTO job.jobs (kind, queue, priority, payload, payload_version, max_attempts, run_at, state)
SELECT $1::text, $2::text, $3::smallint, $4::text::jsonb, $5::integer, $6::integer, t.run_at,
       CASE WHEN t.run_at > now() THEN 'scheduled' ELSE 'available' END::job.job_state
FROM t
RETURNING id
