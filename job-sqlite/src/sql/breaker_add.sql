-- Adds ?2 attempts and ?3 failures at ?4 to kind ?1's circuit breaker, starting a new window
-- at ?4 when the current one (begun at window_start) is ?5 microseconds old or more. Returns
-- the window's counts and start. (Every expression reads the row as it was before.)
INSERT INTO job_breakers (kind, window_start, attempts, failures) VALUES (?1, ?4, ?2, ?3)
ON CONFLICT (kind) DO UPDATE
SET attempts     = CASE WHEN ?4 >= window_start + ?5 THEN 0 ELSE attempts END + excluded.attempts,
    failures     = CASE WHEN ?4 >= window_start + ?5 THEN 0 ELSE failures END + excluded.failures,
    window_start = CASE WHEN ?4 >= window_start + ?5 THEN ?4 ELSE window_start END
RETURNING attempts, failures, window_start
