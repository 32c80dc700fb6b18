-- Records the compensating job of each kind a worker runs ($1 kinds, $2 compensating kinds,
-- $3 their queues, $4 their priorities, $5 their max_attempts, $6 their payload versions, in
-- lockstep; null: the kind has none, and its entry goes), writing only what changed
-- (job.compensations, migrations 0014 and 0039).
WITH k AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::integer[],
                         $6::integer[]) AS k(kind, ckind, cqueue, cpriority, cattempts, cversion)
),
gone AS (
    DELETE FROM job.compensations c
    USING k
    WHERE c.kind = k.kind AND k.ckind IS NULL
)
INSERT INTO job.compensations AS c (kind, compensate_kind, compensate_queue,
                                    compensate_priority, compensate_max_attempts,
                                    compensate_version)
SELECT k.kind, k.ckind, k.cqueue, k.cpriority, k.cattempts, k.cversion
FROM k WHERE k.ckind IS NOT NULL
ON CONFLICT (kind) DO UPDATE
SET compensate_kind = excluded.compensate_kind,
    compensate_queue = excluded.compensate_queue,
    compensate_priority = excluded.compensate_priority,
    compensate_max_attempts = excluded.compensate_max_attempts,
    compensate_version = excluded.compensate_version,
    updated_at = now()
WHERE (c.compensate_kind, c.compensate_queue, c.compensate_priority,
       c.compensate_max_attempts, c.compensate_version)
      IS DISTINCT FROM (excluded.compensate_kind, excluded.compensate_queue,
                        excluded.compensate_priority, excluded.compensate_max_attempts,
                        excluded.compensate_version)
