-- Lists every pause in force, with who made it, why and until when: an operator's, and a
-- breaker's until its resume_at (migration 0015).
SELECT scope, name, paused_by, reason, paused_at, resume_at
FROM job.pauses
WHERE resume_at IS NULL OR resume_at > now()
ORDER BY scope, name
