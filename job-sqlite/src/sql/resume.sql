-- Resumes queue or kind (?1 scope, ?2 name), whoever paused it. Returns a row when it was
-- paused at ?3 (a breaker's pause whose cool-down had ended was not).
DELETE FROM job_pauses WHERE scope = ?1 AND name = ?2
RETURNING resume_at IS NULL OR resume_at > ?3 AS in_force
