-- Whether the job tables need the pruner's VACUUM: only when autovacuum will not run on
-- job.jobs, because the server has it off (`autovacuum = off`) or the table does
-- (`autovacuum_enabled = false`). Claims, finalizes and prunes leave a dead row version per
-- job; without vacuum, claims step over ever more dead index entries and slow down.
SELECT NOT (
    current_setting('autovacuum')::boolean
    AND coalesce((
        SELECT o.option_value::boolean
        FROM pg_class c
        CROSS JOIN LATERAL pg_options_to_table(c.reloptions) AS o
        WHERE c.oid = 'job.jobs'::regclass AND o.option_name = 'autovacuum_enabled'
    ), true)
) AS needed
