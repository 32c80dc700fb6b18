-- One listing page, newest first: up to $9 jobs with ids in [$7, $8) (the window of
-- inspect_window.sql; $8 null: no upper bound) matching $1 states (empty: any), $2 kind,
-- $3 queue, $4 tenant, $5 a tag the job carries (null: any), $6 ids (empty: any), within the
-- tenant scope $10 (null: every tenant), which no filter widens. The id range bounds the rows
-- read by the primary key's range, whatever the filter.
SELECT j.id, j.kind, j.queue, j.priority, j.state::text AS state, j.payload, j.payload_version, j.attempt,
       j.max_attempts, j.run_at, j.lock_token, j.locked_until, j.locked_by, j.cancel_requested,
       j.errors, j.created_at, j.finalized_at, j.deadline, j.unique_key, j.tags, j.tenant,
       j.stuck_since, j.progress, j.progress_at, j.trace_context, j.result, j.ordering_key, j.rate_key,
       (SELECT o.owner FROM job.kind_owners o WHERE o.kind = j.kind) AS owner
FROM job.jobs j
WHERE j.id >= $7::bigint
  AND ($8::bigint IS NULL OR j.id < $8::bigint)
  AND (cardinality($1::text[]) = 0 OR j.state = ANY ($1::text[]::job.job_state[]))
  AND ($2::text IS NULL OR j.kind = $2::text)
  AND ($3::text IS NULL OR j.queue = $3::text)
  AND ($4::text IS NULL OR j.tenant = $4::text)
  AND ($5::text IS NULL OR $5::text = ANY (j.tags))
  AND (cardinality($6::bigint[]) = 0 OR j.id = ANY ($6::bigint[]))
  AND ($10::text IS NULL OR j.tenant = $10::text)
ORDER BY j.id DESC
LIMIT $9::integer
