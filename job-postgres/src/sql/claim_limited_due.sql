-- Of the limited kinds $2 (a concurrency or a rate limit), those with a job `available` in queue
-- $1: one probe of jobs_claim_idx each. A claim takes the advisory locks of these only and
-- leaves the others out (it has nothing of theirs to take), so that the claim of a queue that
-- holds no job of a limited kind neither waits for that kind's lock nor makes the claims of
-- every other queue wait for it (a worker claims every kind it registered in every queue it
-- serves). A job made available after the probe is taken by the next claim.
SELECT k.kind
FROM unnest($2::text[]) AS k(kind)
WHERE EXISTS (SELECT 1 FROM job.jobs j
              WHERE j.queue = $1 AND j.kind = k.kind AND j.state = 'available')
