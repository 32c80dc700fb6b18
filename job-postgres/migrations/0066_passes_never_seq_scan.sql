-- 0066 passes_never_seq_scan: the rescuer's function and the dependency pass that every
-- stager pass runs read job.jobs by its indexes, whatever the table's statistics said when a
-- session planned them. Append-only: change the schema in a new numbered file.
--
-- A PL/pgSQL function plans each of its statements once per session and, from the sixth run
-- on, may keep a generic plan until the table's statistics change, as job.claim did before
-- migration 0064. Planned while job.jobs was empty (a worker started on a new database, or
-- after a VACUUM truncated a drained table), the plans stayed after the table grew, until the
-- pruner's next ANALYZE: with 80,000 rows added after eight passes on the empty table,
-- job.rescue_expired read the whole table by a sequential scan to rescue nothing, and
-- job.dependencies_resolve, which sql/stage.sql runs at every poll of every worker, read it
-- four times (320,000 rows) to resolve nothing. With sequential scans off for the two
-- functions, both read none of it (every scan of job.jobs in them has a primary key or
-- partial index path). A scan with no other path is still made, by the same sequential scan:
-- the setting only makes the planner prefer the others. The statements the store sends for
-- the heartbeat, the stager, the expirer and the progress it saves are planned at each run
-- instead (job-postgres/src/lease.rs, PLANNED_EACH_TIME); tests/store_claim.rs counts the
-- rows each reads.

ALTER FUNCTION job.rescue_expired(integer) SET enable_seqscan = off;
ALTER FUNCTION job.dependencies_resolve(integer) SET enable_seqscan = off;
