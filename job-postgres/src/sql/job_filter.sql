-- A fragment, not a statement: the JobFilter predicate over `job.jobs j` that list.sql, purge.sql
-- and redrive.sql share, spliced (sql.rs) at their `@job_filter` marker line. $1 ids (empty: any),
-- $2 states (empty: any), $3 kind, $4 queue, $5 tenant, $6 a tag the job carries, $7..$8 the
-- finalized_at range [from, to); null: any; $10 the tenant an Admin handle is scoped to (null:
-- every tenant), which no filter widens. A finalized range holds only finished jobs
-- (jobs_finalized_check); saying so as one OR arm per finished state lets the planner read the
-- range from each state's index (jobs_completed_idx, jobs_cancelled_idx, jobs_discarded_idx,
-- migration 0017).
(cardinality($1::bigint[]) = 0 OR j.id = ANY ($1::bigint[]))
  AND (cardinality($2::text[]) = 0 OR j.state::text = ANY ($2::text[]))
  AND ($3::text IS NULL OR j.kind = $3::text)
  AND ($4::text IS NULL OR j.queue = $4::text)
  AND ($5::text IS NULL OR j.tenant = $5::text)
  AND ($6::text IS NULL OR $6::text = ANY (j.tags))
  AND ($7::timestamptz IS NULL OR j.finalized_at >= $7::timestamptz)
  AND ($8::timestamptz IS NULL OR j.finalized_at < $8::timestamptz)
  AND (($7::timestamptz IS NULL AND $8::timestamptz IS NULL)
       OR j.state = 'completed' OR j.state = 'cancelled' OR j.state = 'discarded')
  AND ($10::text IS NULL OR j.tenant = $10::text)
