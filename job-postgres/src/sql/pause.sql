-- Pauses queue or kind ($1 scope, $2 name) until an operator resumes it: the claim takes
-- none of its jobs. An operator's pause replaces a breaker's (which would end by itself).
-- Returns a row when it was not paused by an operator yet.
INSERT INTO job.pauses AS p (scope, name) VALUES ($1::text, $2::text)
ON CONFLICT (scope, name) DO UPDATE
SET paused_by = 'operator', reason = NULL, resume_at = NULL, paused_at = now()
WHERE p.paused_by <> 'operator'
RETURNING scope
