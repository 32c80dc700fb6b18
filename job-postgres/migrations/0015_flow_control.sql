-- 0015 flow control: rate limits and circuit breakers. Append-only: change the schema in a
-- new numbered file.
--
-- Rate limits (`#[job(rate = "100/1m")]`): at most N attempts of a kind start in any window
-- of its period, across every worker; with a rate key (`rate_key = "tenant:{tenant_id}"`),
-- each key of the kind has a window of its own, and jobs without a key share one.
-- job.rate_windows keeps, per (kind, key) ('' for no key), the start times of the last
-- window, oldest first: at most N of them (N is at most 10,000, checked by the worker). Claims
-- of a rate-limited kind run claim_rated.sql under the kind's advisory lock (claim_lock.sql),
-- which reads each key's room at clock_timestamp() (after the lock was granted, so every
-- earlier claim of the kind has committed its starts), claims at most that many of the key's
-- jobs and appends their starts in the same statement.
CREATE TABLE job.rate_windows (
    kind       text NOT NULL CHECK (octet_length(kind) BETWEEN 1 AND 128),
    rate_key   text NOT NULL DEFAULT '' CHECK (octet_length(rate_key) <= 512),
    starts     timestamptz[] NOT NULL DEFAULT '{}'
               CHECK (cardinality(starts) <= 10000),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, rate_key)
);

-- Where the next claim of a rate-limited kind in a queue starts looking for keys with waiting
-- jobs: a claim reads at most 256 keys, after this one and then from the first (round robin).
CREATE TABLE job.rate_cursors (
    kind      text NOT NULL CHECK (octet_length(kind) BETWEEN 1 AND 128),
    queue     text NOT NULL CHECK (octet_length(queue) BETWEEN 1 AND 128),
    after_key text NOT NULL CHECK (octet_length(after_key) <= 512),
    PRIMARY KEY (kind, queue)
);

-- A job's rate key. NOT VALID: no existing row has one, and validating would read the table.
ALTER TABLE job.jobs ADD COLUMN rate_key text;
ALTER TABLE job.jobs ADD CONSTRAINT jobs_rate_key_check
    CHECK (rate_key IS NULL OR octet_length(rate_key) BETWEEN 1 AND 512) NOT VALID;

-- The available jobs that have a rate key, by queue, kind and key in claim order: the claim of
-- a rate-limited kind finds each key with waiting jobs by one probe (a loose index scan) and
-- reads only the jobs its room takes, so a key at its limit costs nothing however many jobs it
-- has waiting. Rows without a rate key are not in it (jobs_claim_idx has them).
CREATE INDEX jobs_rate_key_idx ON job.jobs (queue, kind, rate_key, priority, run_at, id)
    WHERE state = 'available' AND rate_key IS NOT NULL;

-- Gives job `job_id` its rate key, from the statement that inserted it through
-- job.enqueue_unique (as job.set_ordering_key).
CREATE FUNCTION job.set_rate_key(job_id bigint, key text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog
AS $$
    UPDATE job.jobs SET rate_key = key WHERE id = job_id RETURNING true
$$;
REVOKE ALL ON FUNCTION job.set_rate_key(bigint, text) FROM PUBLIC;

-- Circuit breakers (`#[job(breaker(failure_percent = 50, ...))]`): one row per kind with a
-- breaker, counting the attempts that ended in the current window and how many failed.
-- Workers add their counts after each batch of outcomes (breaker_record.sql), which also
-- writes the breaker's settings (every worker of a kind must agree on them), starts a new
-- window when the current one is over, and trips the breaker: it pauses the kind until
-- `now() + cool_down` with the reason, and starts the counts again.
CREATE TABLE job.breakers (
    kind            text PRIMARY KEY CHECK (octet_length(kind) BETWEEN 1 AND 128),
    failure_percent smallint NOT NULL CHECK (failure_percent BETWEEN 1 AND 100),
    min_attempts    integer NOT NULL CHECK (min_attempts BETWEEN 1 AND 1000000),
    window_ms       bigint NOT NULL CHECK (window_ms BETWEEN 1000 AND 2592000000),
    cool_down_ms    bigint NOT NULL CHECK (cool_down_ms BETWEEN 1000 AND 2592000000),
    window_start    timestamptz NOT NULL DEFAULT now(),
    attempts        bigint NOT NULL DEFAULT 0,
    failures        bigint NOT NULL DEFAULT 0,
    trips           bigint NOT NULL DEFAULT 0,
    tripped_at      timestamptz
);

-- A pause says who made it and why, and may end by itself: a breaker's pause ends at
-- `resume_at` (the claim ignores a pause whose `resume_at` has passed; the next trip or an
-- operator's pause overwrites it). An operator's pause has no end.
ALTER TABLE job.pauses
    ADD COLUMN paused_by text NOT NULL DEFAULT 'operator'
        CONSTRAINT pauses_paused_by_check CHECK (paused_by IN ('operator', 'breaker')),
    ADD COLUMN reason text
        CONSTRAINT pauses_reason_check CHECK (octet_length(reason) <= 1024),
    ADD COLUMN resume_at timestamptz;

-- SECURITY DEFINER (every object schema-qualified, search_path pinned): a worker role needs
-- EXECUTE on it, and no write privilege on job.breakers or job.pauses.
--
-- Adds ended attempts to the breakers of kinds (p_kinds, with the attempts and failures
-- counted by a worker and the breaker's settings as that worker has them, in lockstep),
-- and returns the kinds it tripped, with the reason and when the pause ends. Kinds are
-- handled in name order, so two workers' calls never deadlock on the rows. A window that is
-- over starts again at zero. A breaker trips when its window has counted at least
-- min_attempts attempts with failure_percent of them failed: the counts start again, and the
-- kind is paused until now() + cool_down, unless an operator paused it (that pause stays, and
-- nothing is returned) or a breaker pause is still in force.
CREATE FUNCTION job.breaker_record(
    p_kinds        text[],
    p_attempts     bigint[],
    p_failures     bigint[],
    p_percent      smallint[],
    p_min_attempts integer[],
    p_window_ms    bigint[],
    p_cool_down_ms bigint[]
)
RETURNS TABLE (kind text, reason text, resume_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r  record;
    cur job.breakers;
    why text;
    until timestamptz;
    written integer;
BEGIN
    FOR r IN
        SELECT * FROM unnest(p_kinds, p_attempts, p_failures, p_percent, p_min_attempts,
                             p_window_ms, p_cool_down_ms)
                 AS k(kind, attempts, failures, pct, min_attempts, window_ms, cool_down_ms)
        ORDER BY 1
    LOOP
        INSERT INTO job.breakers AS b (kind, failure_percent, min_attempts, window_ms,
                                       cool_down_ms, window_start, attempts, failures)
        VALUES (r.kind, r.pct, r.min_attempts, r.window_ms, r.cool_down_ms, now(),
                r.attempts, r.failures)
        ON CONFLICT ON CONSTRAINT breakers_pkey DO UPDATE
        SET failure_percent = excluded.failure_percent,
            min_attempts    = excluded.min_attempts,
            window_ms       = excluded.window_ms,
            cool_down_ms    = excluded.cool_down_ms,
            window_start    = CASE WHEN now() >= b.window_start + b.window_ms * interval '1 millisecond'
                                   THEN now() ELSE b.window_start END,
            attempts        = CASE WHEN now() >= b.window_start + b.window_ms * interval '1 millisecond'
                                   THEN 0 ELSE b.attempts END + excluded.attempts,
            failures        = CASE WHEN now() >= b.window_start + b.window_ms * interval '1 millisecond'
                                   THEN 0 ELSE b.failures END + excluded.failures
        RETURNING * INTO cur;

        CONTINUE WHEN cur.attempts < cur.min_attempts
                   OR cur.failures * 100 < cur.failure_percent::bigint * cur.attempts;

        why := format('circuit breaker: %s of %s attempts failed (%s%%) in the window since %s; '
                      'it trips at %s%% of at least %s attempts per %s ms',
                      cur.failures, cur.attempts, cur.failures * 100 / cur.attempts,
                      to_char(cur.window_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                      cur.failure_percent, cur.min_attempts,
                      cur.window_ms);
        until := now() + cur.cool_down_ms * interval '1 millisecond';
        INSERT INTO job.pauses AS p (scope, name, paused_at, paused_by, reason, resume_at)
        VALUES ('kind', r.kind, now(), 'breaker', why, until)
        ON CONFLICT (scope, name) DO UPDATE
        SET paused_at = excluded.paused_at, paused_by = 'breaker', reason = excluded.reason,
            resume_at = excluded.resume_at
        WHERE p.resume_at IS NOT NULL AND p.resume_at <= now();
        GET DIAGNOSTICS written = ROW_COUNT;
        -- The counts start again either way; a trip while a pause is in force (the attempts
        -- that were running when it tripped, ending) is not counted.
        UPDATE job.breakers
        SET attempts = 0, failures = 0, window_start = now(),
            trips = trips + least(written, 1),
            tripped_at = CASE WHEN written > 0 THEN now() ELSE tripped_at END
        WHERE job.breakers.kind = r.kind;
        IF written > 0 THEN
            kind := r.kind;
            reason := why;
            resume_at := until;
            RETURN NEXT;
        END IF;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION job.breaker_record(text[], bigint[], bigint[], smallint[], integer[],
                                          bigint[], bigint[]) FROM PUBLIC;
