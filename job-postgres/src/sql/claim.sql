-- Claims up to $5 available jobs of queue $1 for worker $6: job.claim (migration 0021, where
-- the statement and what it skips are described). Per kind (arrays $2..$4, $7 in lockstep):
-- name, newest payload version, lease in milliseconds, and the cluster-wide limit of running
-- jobs (null: none); a limited kind is claimed under its advisory lock (claim_lock.sql), taken
-- in an earlier statement of the same transaction. $8: rate-limited kinds of the queue to stay
-- ahead of (empty: none). Rows come back in claim order (priority, run_at, id).
SELECT c.id, c.lock_token, c.kind, c.queue, c.priority, c.payload, c.payload_version,
       c.attempt, c.max_attempts, c.snoozes, c.trace_context, c.waited_ms
FROM job.claim($1::text, $2::text[], $3::integer[], $4::bigint[], $5::integer, $6::text,
               $7::integer[], $8::text[]) WITH ORDINALITY AS c
ORDER BY c.ordinality
