-- Whether job.jobs needs the pruner's VACUUM: only when autovacuum will not run on it, because
-- the server has it off (`autovacuum = off`) or the table does (`autovacuum_enabled = false`),
-- and only once enough rows changed since the last vacuum or analyze (autovacuum's rule, with
-- a base of 1,000 rows and 5% of the live ones). Claims, finalizes and prunes leave a dead row
-- version per job; without vacuum, claims step over ever more dead index entries, and with
-- statistics from an emptier table they are planned badly.
-- Also whether this role may vacuum it (the table's or the database's owner, or a member of
-- either: a VACUUM by anyone else only warns "skipping" and does nothing), and who may.
SELECT NOT (
           current_setting('autovacuum')::boolean
           AND coalesce((
               SELECT o.option_value::boolean
               FROM pg_class c
               CROSS JOIN LATERAL pg_options_to_table(c.reloptions) AS o
               WHERE c.oid = 'job.jobs'::regclass AND o.option_name = 'autovacuum_enabled'
           ), true)
       )
       AND coalesce((
           SELECT greatest(s.n_dead_tup, s.n_mod_since_analyze) > 1000 + 0.05 * s.n_live_tup
           FROM pg_stat_user_tables s
           WHERE s.relid = 'job.jobs'::regclass
       ), false) AS needed,
       (SELECT pg_has_role(current_user, c.relowner, 'USAGE')
               OR pg_has_role(current_user, d.datdba, 'USAGE')
        FROM pg_class c, pg_database d
        WHERE c.oid = 'job.jobs'::regclass AND d.datname = current_database()) AS allowed,
       current_user::text AS role,
       (SELECT c.relowner::regrole::text FROM pg_class c WHERE c.oid = 'job.jobs'::regclass)
           AS owner
