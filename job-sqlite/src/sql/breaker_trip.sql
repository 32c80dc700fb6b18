-- Trips kind ?1's circuit breaker at ?2: its counts start again (pause_breaker.sql then
-- pauses the kind).
UPDATE job_breakers
SET attempts = 0, failures = 0, window_start = ?2, trips = trips + 1, tripped_at = ?2
WHERE kind = ?1
