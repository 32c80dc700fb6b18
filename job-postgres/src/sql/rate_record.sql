-- Records $2 starts now (clock_timestamp()) for each rate-limited kind in $1, forgetting its
-- starts older than its period ($3 milliseconds), in lockstep (job.rate_windows, migration
-- 0015). Runs in the claim's transaction, under the kinds' advisory locks (claim_lock.sql):
-- no other claim of these kinds writes their rows meanwhile.
WITH k AS (
    SELECT * FROM unnest($1::text[], $2::integer[], $3::bigint[]) AS k(kind, n, per_ms)
),
kept AS (
    UPDATE job.rate_windows w
    SET starts = ARRAY(
            SELECT s.at FROM unnest(w.starts) AS s(at)
            WHERE s.at > clock_timestamp() - k.per_ms * interval '1 millisecond'
            ORDER BY s.at)
        || array_fill(clock_timestamp(), ARRAY[k.n]),
        updated_at = now()
    FROM k
    WHERE w.kind = k.kind
    RETURNING w.kind
)
INSERT INTO job.rate_windows (kind, starts)
SELECT k.kind, array_fill(clock_timestamp(), ARRAY[k.n])
FROM k
WHERE NOT EXISTS (SELECT 1 FROM kept WHERE kept.kind = k.kind)
