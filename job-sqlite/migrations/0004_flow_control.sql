-- 0004 flow control: rate limits and circuit breakers (as job-postgres's migration 0015).
-- Append-only: change the schema in a new numbered file.
--
-- job_rate_starts holds one row per start of a rate-limited kind in its last window; the
-- claim (in its immediate transaction, so no other claim counts the same room) counts them,
-- takes at most the room left, records its starts and forgets those older than the window.
CREATE TABLE job_rate_starts (
    kind TEXT    NOT NULL CHECK (length(CAST(kind AS BLOB)) BETWEEN 1 AND 128),
    at   INTEGER NOT NULL
) STRICT;
CREATE INDEX job_rate_starts_idx ON job_rate_starts (kind, at);

-- A kind's circuit breaker: the attempts ended in the current window and how many failed
-- (the settings travel with each worker's counts).
CREATE TABLE job_breakers (
    kind         TEXT    PRIMARY KEY CHECK (length(CAST(kind AS BLOB)) BETWEEN 1 AND 128),
    window_start INTEGER NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    failures     INTEGER NOT NULL DEFAULT 0,
    trips        INTEGER NOT NULL DEFAULT 0,
    tripped_at   INTEGER
) STRICT;

-- Who paused, why, and when a breaker's pause ends by itself (NULL: when resumed).
ALTER TABLE job_pauses ADD COLUMN paused_by TEXT NOT NULL DEFAULT 'operator'
    CHECK (paused_by IN ('operator', 'breaker'));
ALTER TABLE job_pauses ADD COLUMN reason TEXT CHECK (length(CAST(reason AS BLOB)) <= 1024);
ALTER TABLE job_pauses ADD COLUMN resume_at INTEGER;
