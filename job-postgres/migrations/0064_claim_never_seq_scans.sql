-- 0064 claim_never_seq_scans: job.claim never reads job.jobs by a sequential scan, whatever
-- the table's statistics said when the function planned its statement. Append-only: change
-- the schema in a new numbered file.
--
-- job.claim plans its statement once per connection (`plan_cache_mode =
-- force_generic_plan`, migration 0021) and keeps that plan until the table's statistics
-- change. A worker that starts on an empty job.jobs plans it from an empty table's costs, and
-- the cheapest way to reach the rows it picked, by the plan's reckoning, is then to read the
-- whole table (`Seq Scan on jobs ... Filter: (ctid = ANY (...))`) rather than each row by its
-- ctid. The plan stays after the table has grown, until the next ANALYZE: in a soak of 16,000
-- jobs a second started on an empty table, each claim of 200 read every row (97,000 to
-- 307,000 of them) and took 300 to 875 ms, and the worker finished 3,243 jobs a second in its
-- first 15 s, until the pruner's first VACUUM (ANALYZE) ten seconds in (tables autovacuum
-- vacuums wait for their first doubling, see vacuum_needed.sql, or autovacuum's own ANALYZE).
--
-- Every scan of job.jobs in the statement has an index or ctid path (the bound's and the
-- versions' probes, each version's scan, the running count of a limited kind, the UPDATE by
-- ctid), and job.pauses its primary key: with sequential scans off for the function, the plan
-- made on an empty table is the one made on a large one. The setting is the function's own,
-- not its caller's.

ALTER FUNCTION job.claim(text, text[], integer[], bigint[], integer, text, integer[], text[])
    SET enable_seqscan = off;
