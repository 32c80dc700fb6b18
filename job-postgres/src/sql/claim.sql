-- Claims up to $5 due jobs of queue $1 whose kind is in $2 and whose payload_version is at most
-- that kind's max version in $3, in claim order, skipping rows other claimers hold. Each gets
-- state running, one more attempt, a fresh lock_token, locked_by $6 and a lease of that kind's
-- $4 milliseconds from the database's now.
-- Per-kind values are looked up with array_position so the pick stays one ordered scan of
-- jobs_claim_idx (no join whose plan could need a sort of the whole backlog).
WITH picked AS (
    SELECT j.id
    FROM job.jobs j
    WHERE j.state IN ('available', 'scheduled', 'retryable')
      AND j.run_at <= now()
      AND j.queue = $1::text
      AND j.kind = ANY ($2::text[])
      AND j.payload_version <= ($3::integer[])[array_position($2::text[], j.kind)]
    ORDER BY j.priority, j.run_at, j.id
    LIMIT $5::integer
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE job.jobs j
    SET state        = 'running',
        attempt      = j.attempt + 1,
        lock_token   = gen_random_uuid(),
        locked_by    = $6::text,
        locked_until = now()
            + ($4::bigint[])[array_position($2::text[], j.kind)] * interval '1 millisecond'
    FROM picked
    WHERE j.id = picked.id
    RETURNING j.id, j.lock_token, j.kind, j.queue, j.priority, j.payload, j.payload_version,
              j.attempt, j.max_attempts, j.run_at
)
SELECT id, lock_token, kind, queue, priority, payload::text AS payload, payload_version,
       attempt, max_attempts
FROM claimed
ORDER BY priority, run_at, id
