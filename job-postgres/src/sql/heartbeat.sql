-- Renews many leases, each guarded by (id, lock_token) and running: locked_until becomes the
-- database's now plus that lease's milliseconds, and stuck_since records since when the worker
-- reports the execution stuck (kept while it stays stuck, cleared when not). Returns the
-- renewed ids with cancel_requested; a requested id that does not come back has lost its lease.
-- Rows are locked in id order first, as finalize.sql and release.sql do, so the heartbeat and
-- the completer of one worker, whose batches overlap, never deadlock each other.
WITH u AS (
    SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::bigint[], $4::boolean[])
                      AS u(id, token, lease_ms, stuck)
),
-- The guard (a matching token implies running, by jobs_lease_check), with the lease carried
-- along so the UPDATE joins by primary key only.
locked AS MATERIALIZED (
    SELECT j.id, u.lease_ms, u.stuck
    FROM job.jobs j
    JOIN u ON j.id = u.id AND j.lock_token = u.token
    ORDER BY j.id
    FOR UPDATE OF j
)
UPDATE job.jobs j
SET locked_until = now() + u.lease_ms * interval '1 millisecond',
    stuck_since  = CASE WHEN u.stuck THEN coalesce(j.stuck_since, now()) END
FROM locked u
WHERE j.id = u.id
RETURNING j.id, j.cancel_requested
