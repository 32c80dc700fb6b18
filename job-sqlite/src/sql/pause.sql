-- Pauses queue or kind (?1 scope, ?2 name) at ?3: the claim takes none of its jobs until
-- resumed. Changes a row when it was not paused yet.
INSERT INTO job_pauses (scope, name, paused_at) VALUES (?1, ?2, ?3)
ON CONFLICT (scope, name) DO NOTHING
