-- A fragment, not a statement: the dead letters (discarded jobs) that purge.sql and redrive.sql
-- act on, as the tail of a SELECT over `job.jobs j`: those matching job_filter.sql ($1..$8, $10),
-- lowest id first, at most $9, skipping rows someone holds. Spliced (sql.rs) at their
-- `@dead_letters` marker line.
    FROM job.jobs j
    WHERE j.state = 'discarded'
      AND
-- @job_filter
    ORDER BY j.id
    LIMIT $9::integer
    FOR UPDATE SKIP LOCKED
