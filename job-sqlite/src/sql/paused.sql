-- Lists every pause in force at ?1 (an operator's, and a breaker's until its resume_at), with
-- who made it, why and until when.
SELECT scope, name, paused_by, reason, paused_at, resume_at
FROM job_pauses
WHERE resume_at IS NULL OR resume_at > ?1
ORDER BY scope, name
