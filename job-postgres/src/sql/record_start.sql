-- Records that the execution holding lease ($1 id, $2 token) starts its handler now, guarded
-- by the token (which implies running, jobs_lease_check): the rescuer counts an expired last
-- attempt only when its start was recorded (migration 0044). Returns the row when the lease
-- is still held, nothing when it is not. started_lease is in no index: the update can stay on
-- its page (HOT).
UPDATE job.jobs
SET started_lease = $2
WHERE id = $1 AND lock_token = $2
RETURNING id
