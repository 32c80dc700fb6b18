-- The pruner's ANALYZE of the job tables autovacuum vacuums but whose rows changed by more than
-- 1,000 + 5% of the live ones since their last ANALYZE (`stale` in vacuum_needed.sql, which
-- says why), named in place of the marker (`format('%I.%I')` of a fixed list, there). New
-- statistics make every session plan its statements on the table again. SKIP_LOCKED: a table
-- autovacuum (or anyone) is vacuuming or analyzing is skipped rather than waited for, so that
-- this never waits on autovacuum, nor makes the server cancel it for a lock it holds.
ANALYZE (SKIP_LOCKED) @tables
