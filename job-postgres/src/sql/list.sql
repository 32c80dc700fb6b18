-- Lists jobs matching a filter (job_filter.sql: $1..$8, $10), oldest (lowest id) first, at most
-- $9.
SELECT j.id, j.kind, j.queue, j.priority, j.state::text AS state, j.payload, j.payload_version, j.attempt,
       j.max_attempts, j.run_at, j.lock_token, j.locked_until, j.locked_by, j.cancel_requested,
       j.errors, j.created_at, j.finalized_at, j.deadline, j.unique_key, j.tags, j.tenant,
       j.stuck_since, j.progress, j.progress_at, j.trace_context, j.result, j.ordering_key, j.rate_key,
       (SELECT o.owner FROM job.kind_owners o WHERE o.kind = j.kind) AS owner
FROM job.jobs j
WHERE
-- @job_filter
ORDER BY j.id
LIMIT $9::integer
