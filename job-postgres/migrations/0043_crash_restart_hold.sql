-- 0043 crash_restart_hold: the restart hold of migration 0041 covers crash restarts too.
-- Append-only: change the schema in a new numbered file.
--
-- When a backend dies (the OOM killer, a segfault, a `kill -9`), the postmaster ends every
-- session, reinitializes shared memory, runs crash recovery and answers again: the same event
-- for leases as a restart, but `pg_postmaster_start_time()` keeps the postmaster's first
-- start, so the hold never applied and the rescuers took the leases that ran out during
-- recovery before their holders could renew them. Crash recovery discards the cumulative
-- statistics and sets their reset time to its end (PostgreSQL 15 and later; earlier versions'
-- statistics collector does the same when it restarts), which every role may read:
-- job.server_started_at() is now the later of the two. A `pg_stat_reset_shared('bgwriter')`
-- by an operator also counts as a start: the leases that ran out in the 15 seconds before it
-- wait up to 15 seconds more, nothing else. A standby promoted to primary keeps both times
-- and is not covered.

CREATE OR REPLACE FUNCTION job.server_started_at() RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT greatest(pg_postmaster_start_time(), pg_stat_get_bgwriter_stat_reset_time()) $$;
