-- Deletes the dead letters among ids ?1 (a JSON array). Their steps go with them.
DELETE FROM job_jobs
WHERE state = 'discarded' AND id IN (SELECT value FROM json_each(?1))
