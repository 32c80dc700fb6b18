-- The pruner's ANALYZE of the job tables autovacuum vacuums but that grew past twice their size
-- at their last VACUUM or ANALYZE (`stale` in vacuum_needed.sql, which says why), named in
-- place of the marker (`format('%I.%I')` of a fixed list, there). New statistics make every
-- session plan its statements on the table again. SKIP_LOCKED: a table autovacuum (or anyone)
-- is vacuuming or analyzing is skipped rather than waited for, so that this never waits on
-- autovacuum, nor makes the server cancel it for a lock it holds (the look leaves such tables
-- out, so that SKIP_LOCKED's warning is rare).
ANALYZE (SKIP_LOCKED) @tables
