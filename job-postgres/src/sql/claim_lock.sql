-- Takes the transaction-scoped advisory lock of each kind in $1 (those with a concurrency or
-- a rate limit), in a fixed order (the subquery's sort is not flattened away) so claimers never deadlock.
-- Held until the claim's transaction ends: claims of one limited kind run one at a time.
-- Also turns JIT compilation off for the rest of the transaction, whatever connection it runs
-- on (the worker's own have it off for the session, an application's pool may not): the
-- rate-limited claim's plan is estimated far above jit_above_cost (its per-key scans' limits
-- are parameters), and compiling it took about 1.8 s for a claim that runs in 2-9 ms. And
-- sequential scans off for the rest of the transaction: a connection keeps a statement's
-- generic plan, and one made while job.jobs was empty would read the whole table to reach
-- the rows the claim picked (job.claim sets the same for itself, migration 0064).
SELECT count(pg_advisory_xact_lock(s.key)), (SELECT set_config('jit', 'off', true)),
       (SELECT set_config('enable_seqscan', 'off', true))
FROM (
    SELECT DISTINCT hashtextextended('job.kind:' || k, 0) AS key
    FROM unnest($1::text[]) AS k
    ORDER BY 1
) s
