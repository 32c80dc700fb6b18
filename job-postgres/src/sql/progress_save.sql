-- Records the latest progress of many running jobs, each guarded by (id, lock_token) (a
-- matching token implies running, by jobs_lease_check), with the database's time. Rows are
-- locked in id order, as heartbeat.sql does, so that it never deadlocks with the worker's
-- heartbeat or completer, and never waited for: the lease keeper, which writes this between two
-- heartbeats, is not held up by a row another transaction holds (a step being recorded, a
-- handler's open `complete_in` transaction); it writes the report again with its next
-- heartbeat when fewer were recorded than sent. Returns how many were recorded.
WITH u AS (
    SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[]) AS u(id, token, progress)
),
locked AS MATERIALIZED (
    SELECT j.id, u.progress
    FROM job.jobs j
    JOIN u ON j.id = u.id AND j.lock_token = u.token
    ORDER BY j.id
    FOR NO KEY UPDATE OF j SKIP LOCKED
),
saved AS (
    UPDATE job.jobs j
    SET progress = u.progress::jsonb, progress_at = now()
    FROM locked u
    WHERE j.id = u.id
    RETURNING j.id
)
SELECT count(*) FROM saved
