-- Records the compensating job of kind ?1: ?2 its kind, ?3 its queue, ?4 its priority, ?5 its
-- max_attempts and ?6 its payload version (migrations 0003 and 0016).
INSERT INTO job_compensations (kind, compensate_kind, compensate_queue, compensate_priority,
                               compensate_max_attempts, compensate_version)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (kind) DO UPDATE
SET compensate_kind = excluded.compensate_kind, compensate_queue = excluded.compensate_queue,
    compensate_priority = excluded.compensate_priority,
    compensate_max_attempts = excluded.compensate_max_attempts,
    compensate_version = excluded.compensate_version
