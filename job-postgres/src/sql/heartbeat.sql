-- Renews many leases, each guarded by (id, lock_token) and running: locked_until becomes the
-- database's now plus that lease's milliseconds, unless it is later already (a heartbeat whose
-- answer the keeper gave up on may commit after the next one, with an earlier now: a renewal
-- never moves a lease's end back before the one the worker counts on), and stuck_since
-- records since when the worker reports the execution stuck (kept while it stays stuck,
-- cleared when not).
-- Returns one row per requested lease that is still held: (id, lock_token, cancel_requested,
-- renewed). The token names the lease, not only the job: a worker may send two leases of one
-- job (a give-back whose answer was lost, then the job claimed here again).
-- `renewed` false: another transaction holds the row right now (the handler's own
-- `complete_in` transaction, the completer's finalize, an operator's UPDATE), so it was neither
-- renewed nor found lost. The heartbeat never waits for it: one handler's open transaction
-- must not hold up the leases of every other job of the worker. A requested lease that does not
-- come back has been lost.
-- Rows are locked in id order, as finalize.sql and release.sql do, and never waited for; the
-- store then renews the busy ones one at a time with this statement waiting for their locks
-- (sql.rs, HEARTBEAT_WAITING) under a short lock_timeout. FOR NO KEY UPDATE, the lock the
-- UPDATE takes anyway: it does not conflict with the FOR KEY SHARE lock that inserting a step
-- (its foreign key) takes on the job's row.
WITH u AS (
    SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::bigint[], $4::boolean[])
                      AS u(id, token, lease_ms, stuck)
),
-- The guard (a matching token implies running, by jobs_lease_check), with the lease carried
-- along so the UPDATE joins by primary key only.
locked AS MATERIALIZED (
    SELECT j.id, j.lock_token, u.lease_ms, u.stuck
    FROM job.jobs j
    JOIN u ON j.id = u.id AND j.lock_token = u.token
    ORDER BY j.id
    FOR NO KEY UPDATE OF j SKIP LOCKED
),
renewed AS (
    UPDATE job.jobs j
    SET locked_until = greatest(j.locked_until, now() + u.lease_ms * interval '1 millisecond'),
        stuck_since  = CASE WHEN u.stuck THEN coalesce(j.stuck_since, now()) END
    FROM locked u
    WHERE j.id = u.id
    RETURNING j.id, j.lock_token, j.cancel_requested
)
SELECT id, lock_token, cancel_requested, true AS renewed FROM renewed
UNION ALL
-- The rows skipped, as the statement's snapshot shows them: one whose lease changed hands
-- since reads as held once more, and the next heartbeat finds it lost.
SELECT j.id, j.lock_token, false, false
FROM u
JOIN job.jobs j ON j.id = u.id AND j.lock_token = u.token
WHERE NOT EXISTS (SELECT 1 FROM locked l WHERE l.id = u.id)
