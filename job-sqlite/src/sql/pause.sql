-- Pauses queue or kind (?1 scope, ?2 name) at ?3 until an operator resumes it: the claim takes
-- none of its jobs. An operator's pause replaces a breaker's. Changes a row when it was not
-- paused by an operator yet.
INSERT INTO job_pauses (scope, name, paused_at) VALUES (?1, ?2, ?3)
ON CONFLICT (scope, name) DO UPDATE
SET paused_by = 'operator', reason = NULL, resume_at = NULL, paused_at = excluded.paused_at
WHERE job_pauses.paused_by <> 'operator'
