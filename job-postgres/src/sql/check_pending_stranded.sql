-- Pending rows that wait for nothing (migration 0040 makes each such row written since
-- available, or wakes its key, at its commit): no unresolved edge, and no ordering key, or a
-- key with no head. Read through jobs_ordering_pending_idx. (A key whose head has just ended
-- may wait on job.ordering_wake for the stager's next pass, about a second; that list is not
-- read here: the roles that check may not read it.)
SELECT count(*) AS n
FROM job.jobs j
WHERE j.state = 'pending'
  AND NOT EXISTS (SELECT 1 FROM job.dependencies d WHERE d.job_id = j.id AND NOT d.resolved)
  AND (j.ordering_key IS NULL
       OR NOT EXISTS (SELECT 1 FROM job.jobs h
                      WHERE h.ordering_key = j.ordering_key
                        AND h.state IN ('scheduled', 'available', 'running', 'retryable')))
