-- A fragment, not a statement: the JobFilter predicate over `job.jobs j` that list.sql, purge.sql
-- and redrive.sql share, spliced (sql.rs) at their `@job_filter` marker line. $1 ids (empty: any),
-- $2 states (empty: any), $3 kind, $4 queue, $5 tenant, $6 a tag the job carries, $7..$8 the
-- finalized_at range [from, to); null: any; $10 the tenant an Admin handle is scoped to (null:
-- every tenant), which no filter widens. A finalized range holds only finished jobs
-- (jobs_finalized_check); saying so as one OR arm per finished state lets the planner read the
-- range from each state's index (jobs_completed_idx, jobs_cancelled_idx, jobs_discarded_idx,
-- migration 0017). With a range, the arms also apply the states asked for ($2 is folded into
-- them when the statement is planned for its values): `state = ANY ($2)` beside them made the
-- planner count the state's share two or three times (once more in dead_letters.sql), and it
-- planned a dead-letter redrive over a million rows as a scan and a sort of all of them (1.1 s,
-- against 20-30 ms now). `state = ANY` compares the enum, which the partial indexes' `state =`
-- predicates can match, not its text; $2 is bound as `job.job_state[]` (admin.rs's
-- `StateLabel`), since a cast of `text[]` in the statement is not folded when it is planned.
-- No index has `state = 'running'` for its predicate: a listing of the running jobs alone says
-- `locked_until IS NOT NULL` too (true of every running row and of no other, by
-- jobs_lease_check), the predicate of jobs_rescue_idx, which holds the running rows only;
-- without it, `job list --state running` walked the primary key through every finished job.
(cardinality($1::bigint[]) = 0 OR j.id = ANY ($1::bigint[]))
  AND (cardinality($2::job.job_state[]) = 0 OR $7::timestamptz IS NOT NULL OR $8::timestamptz IS NOT NULL
       OR j.state = ANY ($2::job.job_state[]))
  AND ($2::job.job_state[] <> '{running}'::job.job_state[] OR j.locked_until IS NOT NULL)
  AND ($3::text IS NULL OR j.kind = $3::text)
  AND ($4::text IS NULL OR j.queue = $4::text)
  AND ($5::text IS NULL OR j.tenant = $5::text)
  AND ($6::text IS NULL OR $6::text = ANY (j.tags))
  AND ($7::timestamptz IS NULL OR j.finalized_at >= $7::timestamptz)
  AND ($8::timestamptz IS NULL OR j.finalized_at < $8::timestamptz)
  AND (($7::timestamptz IS NULL AND $8::timestamptz IS NULL)
       OR (j.state = 'completed' AND (cardinality($2::job.job_state[]) = 0 OR 'completed' = ANY ($2::job.job_state[])))
       OR (j.state = 'cancelled' AND (cardinality($2::job.job_state[]) = 0 OR 'cancelled' = ANY ($2::job.job_state[])))
       OR (j.state = 'discarded' AND (cardinality($2::job.job_state[]) = 0 OR 'discarded' = ANY ($2::job.job_state[]))))
  AND ($10::text IS NULL OR j.tenant = $10::text)
