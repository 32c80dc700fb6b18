-- Gives leases back, each guarded by (id, lock_token) and running: available at once, the
-- attempt not counted, the lease cleared. Wakes the queues so another worker takes them now.
WITH released AS (
    UPDATE job.jobs j
    SET state        = 'available',
        attempt      = j.attempt - 1,
        run_at       = least(j.run_at, now()),
        lock_token   = NULL,
        locked_until = NULL,
        locked_by    = NULL
    FROM unnest($1::bigint[], $2::uuid[]) AS u(id, token)
    WHERE j.id = u.id AND j.lock_token = u.token AND j.state = 'running'
    RETURNING j.queue
),
woken AS (
    SELECT pg_notify('job_insert', q.queue)
    FROM (SELECT DISTINCT queue FROM released) q
)
SELECT count(*) AS released, (SELECT count(*) FROM woken) AS queues_woken
FROM released
