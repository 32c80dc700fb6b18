-- Recovers up to $1 expired leases, and only those: job.rescue_expired (migration 0026, where
-- the statement and how it reads the leases are described; 0048 made it name the jobs, and
-- 0054 refuse a negative or NULL count).
-- Returns how many became retryable, how many were discarded (attempts exhausted), how many
-- queues were woken, and per rescued job, in lockstep arrays ordered by id: its id, kind, the
-- worker whose lease expired (null: none recorded) and the state it went to.
SELECT r.retried, r.discarded, r.queues_woken, r.jobs, r.kinds, r.workers, r.states
FROM job.rescue_expired($1::integer) AS r
