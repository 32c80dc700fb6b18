-- Restarts kind ?1's circuit breaker counts at ?2 after it tripped; counts a trip when ?3
-- (pause_breaker.sql paused the kind: a trip while a pause is in force is not counted).
UPDATE job_breakers
SET attempts = 0, failures = 0, window_start = ?2, trips = trips + ?3,
    tripped_at = CASE WHEN ?3 THEN ?2 ELSE tripped_at END
WHERE kind = ?1
