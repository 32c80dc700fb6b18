-- Which job tables need the pruner's VACUUM: only those autovacuum will not vacuum, because
-- the server has it off (`autovacuum = off`) or the table does (`autovacuum_enabled = false`),
-- and only once enough rows changed since the table's last vacuum or analyze (autovacuum's
-- rule, with a base of 1,000 rows and 5% of the live ones), each table judged on its own.
-- Claims, finalizes and prunes leave a dead row version per job in job.jobs; without vacuum,
-- claims step over ever more dead index entries, and with statistics from an emptier table
-- they are planned badly. The other tables churn too: job.ordering_wake takes a row and loses
-- it for every keyed job that waits behind a head (an empty list read as every dead row it
-- ever held, by every stager pass), job.dependencies rewrites each edge as it resolves,
-- job.step_totals rewrites a job's row at each of its steps, and job.rate_windows,
-- job.rate_cursors and job.leaders are rewritten by claims and leaders.
--
-- `stale`: of the tables autovacuum does vacuum, those that outgrew the size the planner
-- knows (more than twice it and 1 MiB), for the pruner's ANALYZE only.
-- A session keeps its plan of a statement (job.claim's queries among them) until the table's
-- statistics change, so a plan made while the table was small stays after it grew: in a soak
-- at 20,419 jobs a second on a server with autovacuum on, the claims of a worker started on
-- an empty table read the whole table by a sequential scan (a plan costed for a table of one
-- page), 0.3 to 2.2 seconds each once it held a million rows, and the worker
-- finished 460 jobs a second, until autovacuum's first ANALYZE (its naptime, then a VACUUM
-- of the table before it) more than a minute in. Growth, not change, is the rule: a table
-- that churns at a steady size keeps its plans good, and autovacuum analyzes it on its own
-- schedule; an ANALYZE of ours every pass would hold the lock that autovacuum's VACUUM then
-- skips the table for. A growing table is analyzed at each doubling, a few times in all.
--
-- Also whether this role may vacuum them (job.jobs's owner, which owns the schema's tables,
-- or the database's, or a member of either: a VACUUM or ANALYZE by anyone else only warns
-- "skipping" and does nothing), and who may.
WITH t AS (
    SELECT format('%I.%I', n.nspname, c.relname) AS name,
           -- Vacuumed by nobody else: autovacuum is off for the server or the table.
           NOT (current_setting('autovacuum')::boolean
                AND coalesce((SELECT o.option_value::boolean
                              FROM pg_options_to_table(c.reloptions) AS o
                              WHERE o.option_name = 'autovacuum_enabled'), true)) AS ours,
           greatest(s.n_dead_tup, s.n_mod_since_analyze) > 1000 + 0.05 * s.n_live_tup
               AS churned,
           -- The table is more than 1 MiB (128 pages of 8 KiB) larger than twice its size at
           -- its last VACUUM or ANALYZE (`relpages`, which the planner's costs scale from; its
           -- size on disk is exact at once, where the statistics' row counts lag), and no one
           -- holds a lock that an ANALYZE would wait for (autovacuum vacuuming it):
           -- SKIP_LOCKED would only warn.
           pg_relation_size(c.oid) / current_setting('block_size')::bigint
               > 2 * c.relpages::bigint + 128
               AND NOT EXISTS (SELECT 1 FROM pg_locks l
                               WHERE l.locktype = 'relation' AND l.relation = c.oid
                                 AND l.granted
                                 AND l.mode IN ('ShareUpdateExclusiveLock', 'ShareLock',
                                                'ShareRowExclusiveLock', 'ExclusiveLock',
                                                'AccessExclusiveLock')) AS outgrown
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_stat_user_tables s ON s.relid = c.oid
    WHERE n.nspname = 'job'
      AND c.relname IN ('jobs', 'steps', 'step_totals', 'dependencies', 'ordering_wake',
                        'rate_windows', 'rate_cursors', 'leaders')
)
SELECT coalesce(ARRAY(SELECT name FROM t WHERE ours AND churned ORDER BY name), '{}') AS needed,
       coalesce(ARRAY(SELECT name FROM t WHERE NOT ours AND outgrown ORDER BY name), '{}')
           AS stale,
       (SELECT pg_has_role(current_user, c.relowner, 'USAGE')
               OR pg_has_role(current_user, d.datdba, 'USAGE')
        FROM pg_class c, pg_database d
        WHERE c.oid = 'job.jobs'::regclass AND d.datname = current_database()) AS allowed,
       current_user::text AS role,
       (SELECT c.relowner::regrole::text FROM pg_class c WHERE c.oid = 'job.jobs'::regclass)
           AS owner
