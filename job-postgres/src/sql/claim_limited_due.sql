-- Of the limited kinds $2 (a concurrency or a rate limit), those with a job `available` in queue
-- $1, in the claim order of their first such job: one probe of jobs_claim_idx each. A claim
-- takes the advisory locks of these only and leaves the others out (it has nothing of theirs to
-- take), so that the claim of a queue that holds no job of a limited kind neither waits for
-- that kind's lock nor makes the claims of every other queue wait for it (a worker claims every
-- kind it registered in every queue it serves). The rate-limited kinds are claimed in this
-- order, each by a statement of its own, so that the one with the oldest job goes first rather
-- than the first by name. A job made available after the probe is taken by the next claim.
SELECT k.kind
FROM unnest($2::text[]) AS k(kind)
CROSS JOIN LATERAL (
    SELECT j.priority, j.run_at, j.id
    FROM job.jobs j
    WHERE j.queue = $1 AND j.kind = k.kind AND j.state = 'available'
    ORDER BY j.priority, j.run_at, j.id
    LIMIT 1
) f
ORDER BY f.priority, f.run_at, f.id
