-- How many jobs of kind ?1 run now (hold a lease), for its concurrency limit. Read inside the
-- claim's immediate transaction, so no other claim counts the same room.
SELECT count(*) FROM job_jobs WHERE locked_until IS NOT NULL AND kind = ?1
