-- Takes the transaction-scoped advisory lock of each kind in $1 (those with a concurrency or
-- a rate limit), in a fixed order (the subquery's sort is not flattened away) so claimers never deadlock.
-- Held until the claim's transaction ends: claims of one limited kind run one at a time.
SELECT count(pg_advisory_xact_lock(s.key))
FROM (
    SELECT DISTINCT hashtextextended('job.kind:' || k, 0) AS key
    FROM unnest($1::text[]) AS k
    ORDER BY 1
) s
