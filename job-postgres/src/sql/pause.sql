-- Pauses queue or kind ($1 scope, $2 name): the claim takes none of its jobs until resumed.
-- Returns a row when it was not paused yet.
INSERT INTO job.pauses (scope, name) VALUES ($1::text, $2::text)
ON CONFLICT (scope, name) DO NOTHING
RETURNING scope
