-- Renews many leases, each guarded by (id, lock_token) and running: locked_until becomes the
-- database's now plus that lease's milliseconds. Returns the renewed ids with cancel_requested;
-- a requested id that does not come back has lost its lease.
UPDATE job.jobs j
SET locked_until = now() + u.lease_ms * interval '1 millisecond'
FROM unnest($1::bigint[], $2::uuid[], $3::bigint[]) AS u(id, token, lease_ms)
WHERE j.id = u.id AND j.lock_token = u.token AND j.state = 'running'
RETURNING j.id, j.cancel_requested
