-- Resumes queue or kind (?1 scope, ?2 name). Changes a row when it was paused.
DELETE FROM job_pauses WHERE scope = ?1 AND name = ?2
