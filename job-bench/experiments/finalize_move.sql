-- Experiment (`drain --raw-only --raw-setup-sql job-bench/experiments/finished_table.sql
-- --raw-finalize-sql job-bench/experiments/finalize_move.sql --raw-finalize-deletes`):
-- completion moves the job's row out of job.jobs into a table of finished jobs
-- (finished_table.sql), so that the queue's table holds only what waits or runs; guarded and
-- locked as finalize.sql is. Only completions; returns the ordinalities written.
WITH u AS (
    SELECT *
    FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::bigint[], $5::boolean[],
                $6::integer[], $7::text[], $8::text[], $9::text[])
         WITH ORDINALITY AS u(id, token, state, delay_ms, snooze, error_attempt, error_class,
                              error_message, result, ord)
),
locked AS MATERIALIZED (
    SELECT j.id, u.result, u.ord
    FROM job.jobs j
    JOIN u ON j.id = u.id AND j.lock_token = u.token
    ORDER BY j.id
    FOR UPDATE OF j SKIP LOCKED
),
gone AS (
    DELETE FROM job.jobs j USING locked l WHERE j.id = l.id
    RETURNING j.id, j.kind, j.queue, j.payload, j.attempt, l.result, j.created_at, l.ord
),
moved AS (
    INSERT INTO bench_experiment.finished
    SELECT id, kind, queue, payload, attempt, result::jsonb, created_at, now() FROM gone
)
SELECT ord FROM gone
