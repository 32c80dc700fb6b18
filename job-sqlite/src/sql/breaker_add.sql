-- Adds ?2 attempts and ?3 failures at ?4 to kind ?1's circuit breaker, starting a new window
-- at ?4 when the current one (begun at window_start) is ?5 microseconds old or more. Returns
-- the window's counts and start. (Every expression reads the row as it was before.) Each sum
-- is held at 2^62: SQLite turns an integer sum past 2^63 into a float, which no longer reads
-- as a count, and a row another writer gave counts near that bound would then fail every
-- call for its kind until its window ended (the worker's sums never come near it).
INSERT INTO job_breakers (kind, window_start, attempts, failures) VALUES (?1, ?4, ?2, ?3)
ON CONFLICT (kind) DO UPDATE
SET attempts     = min(CASE WHEN ?4 >= window_start + ?5 THEN 0 ELSE attempts END
                       + excluded.attempts, 4611686018427387904),
    failures     = min(CASE WHEN ?4 >= window_start + ?5 THEN 0 ELSE failures END
                       + excluded.failures, 4611686018427387904),
    window_start = CASE WHEN ?4 >= window_start + ?5 THEN ?4 ELSE window_start END
RETURNING attempts, failures, window_start
