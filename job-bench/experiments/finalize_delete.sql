-- Experiment (`drain --raw-only --raw-finalize-sql job-bench/experiments/finalize_delete.sql
-- --raw-finalize-deletes`): completion as a DELETE of the job's row, as graphile-worker does,
-- instead of finalize.sql's UPDATE to `completed`; the same guard by (id, lock_token) and the
-- same lock step. Only completions (the raw loop writes nothing else); returns the
-- ordinalities written, as finalize.sql does.
WITH u AS (
    SELECT *
    FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::bigint[], $5::boolean[],
                $6::integer[], $7::text[], $8::text[], $9::text[])
         WITH ORDINALITY AS u(id, token, state, delay_ms, snooze, error_attempt, error_class,
                              error_message, result, ord)
),
locked AS MATERIALIZED (
    SELECT j.id, u.ord
    FROM job.jobs j
    JOIN u ON j.id = u.id AND j.lock_token = u.token
    ORDER BY j.id
    FOR UPDATE OF j SKIP LOCKED
)
DELETE FROM job.jobs j USING locked l WHERE j.id = l.id
RETURNING l.ord
