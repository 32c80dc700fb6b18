-- Recorded steps whose job row is gone (the foreign key's ON DELETE CASCADE should make it
-- zero): an anti-join on the jobs' primary key, one pass over job.steps.
SELECT count(*) AS n
FROM job.steps s
WHERE NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.id = s.job_id)
