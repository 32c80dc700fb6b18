-- One listing page, newest first: up to $9 jobs with ids in [$7, $8) (the window of
-- inspect_window.sql; $8 null: no upper bound) matching $1 states (empty: any), $2 kind,
-- $3 queue, $4 tenant, $5 a tag the job carries (null: any), $6 ids (empty: any), within the
-- tenant scope $10 (null: every tenant), which no filter widens. The id range bounds the rows
-- read by the primary key's range, whatever the filter.
--
-- The summary a listing shows (job_summary.sql), not the row: a page of 1 MiB payloads once
-- read 50 MiB to show 17 KB.
-- @job_summary
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
