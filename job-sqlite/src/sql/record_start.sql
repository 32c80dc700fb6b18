-- Records that the execution holding lease (?1 id, ?2 lock_token) starts its handler now,
-- guarded by the token, running and the lease's end (?3, the database's now): the rescuer
-- counts an expired last attempt only when its start was recorded (migrations/0017), and a
-- lease already out is not one to start under. Returns the id while the lease is held and
-- live, no row when not.
UPDATE job_jobs
SET started_lease = ?2
WHERE id = ?1 AND lock_token = ?2 AND state = 'running' AND locked_until > ?3
RETURNING id
