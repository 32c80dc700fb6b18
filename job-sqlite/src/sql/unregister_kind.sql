-- Forgets the compensating job of kind ?1 (migration 0003).
DELETE FROM job_compensations WHERE kind = ?1
