-- Records one step's output (?3 name, ?4 JSON text, ?5 now), guarded by (id, lock_token) and
-- running: the insert selects from the guard row, so a lost lease inserts nothing. Run in an
-- immediate transaction after lease_read.sql. A name already recorded keeps its first output.
INSERT INTO job_steps (job_id, name, output, attempt, recorded_at)
SELECT id, ?3, ?4, attempt, ?5
FROM job_jobs
WHERE id = ?1 AND lock_token = ?2 AND state = 'running'
ON CONFLICT (job_id, name) DO NOTHING
