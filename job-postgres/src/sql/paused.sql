-- Lists every paused queue and kind (a breaker's pause until its resume_at).
SELECT scope, name FROM job.pauses
WHERE resume_at IS NULL OR resume_at > now()
ORDER BY scope, name
