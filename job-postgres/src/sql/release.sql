-- Gives leases back, each guarded by (id, lock_token) and running: available at once, the
-- attempt not counted, the lease cleared. Wakes the queues so another worker takes them now.
WITH u AS (
    SELECT * FROM unnest($1::bigint[], $2::uuid[]) AS u(id, token)
),
locked AS MATERIALIZED (
    -- In id order, like heartbeat.sql and finalize.sql: no deadlock between them.
    -- The guard: a matching token implies running (jobs_lease_check).
    SELECT j.id
    FROM job.jobs j
    JOIN u ON j.id = u.id AND j.lock_token = u.token
    ORDER BY j.id
    FOR UPDATE OF j
),
released AS (
    UPDATE job.jobs j
    SET state        = 'available',
        attempt      = j.attempt - 1,
        run_at       = least(j.run_at, now()),
        lock_token   = NULL,
        locked_until = NULL,
        locked_by    = NULL
    FROM locked l
    WHERE j.id = l.id
    RETURNING j.queue
),
woken AS (
    SELECT pg_notify('job_insert', q.queue)
    FROM (SELECT DISTINCT queue FROM released) q
)
SELECT count(*) AS released, (SELECT count(*) FROM woken) AS queues_woken
FROM released
