-- Makes up to $1 due jobs claimable: `scheduled` and `retryable` rows whose run_at has come
-- become `available`, keeping their run_at (their place in the claim's order), skipping rows
-- someone holds. Reads only due rows, oldest first, whatever their queue, through
-- jobs_staging_idx (migration 0047: a probe per queue holding waiting rows, as before, cost a
-- pass as much as the queues). Wakes the queues it filled (NOTIFY is delivered at commit).
-- Then promotes the pending jobs of up to $1 keys on the ordering wake-up list
-- (job.ordering_wake_up, migration 0012; an empty list costs one probe), and resolves up to $1
-- dependents whose dependencies have ended (job.dependencies_resolve, migration 0013). Returns
-- how many rows it staged, and how many it promoted or discarded.
WITH due AS (
    SELECT j.id
    FROM job.jobs j
    WHERE j.state IN ('scheduled', 'retryable')
      AND j.run_at <= now()
    ORDER BY j.run_at
    LIMIT $1::integer
    FOR NO KEY UPDATE SKIP LOCKED
),
staged AS (
    UPDATE job.jobs j
    SET state = 'available'
    -- By primary key, whatever the planner makes of `due`'s size: joined, the rows could be
    -- matched by a scan of the whole table (a generic plan did, reading every row).
    WHERE j.id = ANY (ARRAY(SELECT due.id FROM due)) AND j.state IN ('scheduled', 'retryable')
    RETURNING j.queue
),
woken AS (
    SELECT pg_notify('job_insert', s.queue)
    FROM (SELECT DISTINCT queue FROM staged) s
)
SELECT (SELECT count(*) FROM staged) AS staged, (SELECT count(*) FROM woken) AS woken,
       job.ordering_wake_up($1::integer)::bigint
           + job.dependencies_resolve($1::integer)::bigint AS promoted
