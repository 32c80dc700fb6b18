-- How many attempts of kind ?1 started after ?2 (the start of its rate window), for its rate
-- limit. Read inside the claim's immediate transaction, so no other claim counts the same room.
SELECT count(*) FROM job_rate_starts WHERE kind = ?1 AND at > ?2
