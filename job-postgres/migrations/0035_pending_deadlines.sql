-- 0035 pending_deadlines: a pending job's deadline is kept while it waits. Append-only: change
-- the schema in a new numbered file.
--
-- The expirer (expire.sql) read waiting jobs in `available`, `scheduled` and `retryable`
-- only, through jobs_deadline_idx. A `pending` job (waiting for the jobs it depends on, or
-- behind its ordering key's head) was expired only once it left `pending`: a dependent whose
-- dependency never ended (scheduled months ahead, say, or itself waiting) stayed pending past
-- its deadline for as long as that lasted, its compensation unfired and its own dependents
-- waiting. Its deadline is what it must start by, wherever it waits; the expirer now reads
-- pending jobs past their deadline too, through an index of their own (pending jobs with a
-- deadline are few, so it costs the other jobs' writes nothing), and discards them as it
-- discards the others (class `expired`), which fails its dependents and fires its
-- compensation as any discard does. A pending job is never a head, so no key is released.
--
-- Built in this migration's transaction (CREATE INDEX CONCURRENTLY cannot run in one): it
-- reads the table once, and holds off writes to job.jobs meanwhile; on a large table, apply it
-- when a short pause of enqueues is acceptable.
CREATE INDEX jobs_pending_deadline_idx ON job.jobs (deadline)
    WHERE deadline IS NOT NULL AND state = 'pending';
