-- Recorded steps whose job row is gone (job.jobs' delete and truncate triggers, migration
-- 0057, should make it zero; a foreign key's cascade did before): an anti-join on the jobs'
-- primary key, one pass over job.steps.
SELECT count(*) AS n
FROM job.steps s
WHERE NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.id = s.job_id)
