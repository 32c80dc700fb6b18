-- Takes the advisory locks of the ordering keys $1 in one order (job.ordering_lock_keys,
-- migration 0016), before a bulk enqueue split into several statements inserts them.
SELECT job.ordering_lock_keys($1::text[])
