-- Records that the execution holding lease (?1 id, ?2 lock_token) starts its handler now,
-- guarded by the token and running: the rescuer counts an expired last attempt only when its
-- start was recorded (migrations/0017). Returns the id while the lease is held, no row when
-- it is not.
UPDATE job_jobs
SET started_lease = ?2
WHERE id = ?1 AND lock_token = ?2 AND state = 'running'
RETURNING id
