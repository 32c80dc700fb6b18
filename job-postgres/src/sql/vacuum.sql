-- The pruner's VACUUM when autovacuum will not run (vacuum_needed.sql): reclaims dead row
-- versions and refreshes the planner's statistics of the job tables that need it, named in
-- place of the marker (`format('%I.%I')` of a fixed list, in vacuum_needed.sql). SKIP_LOCKED:
-- a VACUUM already running (another worker's, or an operator's) is enough. Runs outside a
-- transaction.
VACUUM (SKIP_LOCKED, ANALYZE) @tables
