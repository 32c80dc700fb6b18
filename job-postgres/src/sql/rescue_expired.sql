-- Recovers up to $1 expired leases, and only those: job.rescue_expired (migration 0026, where
-- the statement and how it reads the leases are described). Returns how many became
-- retryable, how many were discarded (attempts exhausted) and how many queues were woken.
SELECT r.retried, r.discarded, r.queues_woken FROM job.rescue_expired($1::integer) AS r
