-- Records the compensating job of kind ?1: ?2 its kind and ?3 its queue (migration 0003).
INSERT INTO job_compensations (kind, compensate_kind, compensate_queue)
VALUES (?1, ?2, ?3)
ON CONFLICT (kind) DO UPDATE
SET compensate_kind = excluded.compensate_kind, compensate_queue = excluded.compensate_queue
