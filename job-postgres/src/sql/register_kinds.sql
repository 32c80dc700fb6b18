-- Records the compensating job of each kind a worker runs ($1 kinds, $2 compensating kinds,
-- $3 their queues, in lockstep; null: the kind has none, and its entry goes), writing only
-- what changed (job.compensations, migration 0014).
WITH k AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS k(kind, ckind, cqueue)
),
gone AS (
    DELETE FROM job.compensations c
    USING k
    WHERE c.kind = k.kind AND k.ckind IS NULL
)
INSERT INTO job.compensations AS c (kind, compensate_kind, compensate_queue)
SELECT k.kind, k.ckind, k.cqueue FROM k WHERE k.ckind IS NOT NULL
ON CONFLICT (kind) DO UPDATE
SET compensate_kind = excluded.compensate_kind,
    compensate_queue = excluded.compensate_queue,
    updated_at = now()
WHERE (c.compensate_kind, c.compensate_queue)
      IS DISTINCT FROM (excluded.compensate_kind, excluded.compensate_queue)
