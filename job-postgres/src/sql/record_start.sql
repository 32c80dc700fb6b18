-- Records that the execution holding lease ($1 id, $2 token) starts its handler now, guarded
-- by the token (which implies running, jobs_lease_check) and by the lease's end: the rescuer
-- counts an expired last attempt only when its start was recorded (migration 0044), and a
-- lease already out is not one to start under. Returns the row when the lease is held and
-- live, nothing when not. started_lease is in no index: the update can stay on its page (HOT).
UPDATE job.jobs
SET started_lease = $2
WHERE id = $1 AND lock_token = $2 AND locked_until > now()
RETURNING id
