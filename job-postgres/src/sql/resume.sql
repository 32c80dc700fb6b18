-- Resumes queue or kind ($1 scope, $2 name), whoever paused it. Returns a row when it was
-- paused (a breaker's pause whose cool-down had ended was not); a resumed queue is woken so
-- idle workers claim at once (a resumed kind waits for the next poll).
WITH resumed AS (
    DELETE FROM job.pauses WHERE scope = $1::text AND name = $2::text
    RETURNING scope, name, resume_at
)
SELECT r.scope
FROM resumed r
LEFT JOIN LATERAL (SELECT pg_notify('job_insert', r.name) WHERE r.scope = 'queue') n ON true
WHERE r.resume_at IS NULL OR r.resume_at > now()
