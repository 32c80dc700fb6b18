-- 0046 breaker_counts: job.breaker_record refuses counts no worker sends, and its arithmetic
-- cannot overflow. Append-only: change the schema in a new numbered file.
--
-- job.breaker_record (migration 0015) is a door: any role granted the worker's privileges
-- calls it with counts and settings of its own. It stored whatever counts it was given, and
-- compared `failures * 100` with `failure_percent * attempts` in bigint. A window holding
-- more than 92 quadrillion attempts (one crafted call, with a failure percent of 1 so that the
-- call itself did not overflow) made every later call for the kind fail with "bigint out of
-- range", and since one call carries every kind of a worker's batch, no breaker of that worker
-- counted anything until the window ended (up to 30 days). Negative counts went in too, and a
-- window with negative attempts never trips.
--
-- Now each call's counts must be what a worker counts in one batch (0 to 4,294,967,295
-- attempts, a u32, and at most that many failures), with kinds, counts and settings in
-- arrays of one length, each kind once, at most 1,000 kinds, each a name the kind rule takes
-- (job.name_problem: the function writes pauses, which the worker role cannot write itself,
-- and every reporter pass reads every pause): anything else is refused, naming the argument
-- and the kind. The sums are held at 2^62 (repeated calls of the largest counts that never
-- trip would otherwise reach bigint's bound in some 60 hours, and every later call carrying
-- the kind would fail), and the comparisons and the reason's percentage are computed in
-- numeric; the trips count stops at bigint's bound. The table refuses negative counts, more
-- failures than attempts and sums over 2^62 from any writer; rows that already break that
-- start their window again at zero. A worker with more than 1,000 kinds with breakers sends
-- them in several calls of one transaction (job-postgres/src/report.rs).

CREATE OR REPLACE FUNCTION job.breaker_record(
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
    n integer := coalesce(cardinality(p_kinds), 0);
BEGIN
    IF coalesce(cardinality(p_attempts), 0) <> n OR coalesce(cardinality(p_failures), 0) <> n
       OR coalesce(cardinality(p_percent), 0) <> n OR coalesce(cardinality(p_min_attempts), 0) <> n
       OR coalesce(cardinality(p_window_ms), 0) <> n OR coalesce(cardinality(p_cool_down_ms), 0) <> n
    THEN
        RAISE EXCEPTION 'invalid breaker_record arguments: the kinds, counts and settings must be '
                        'arrays of one length (% kinds, % attempts, % failures, % percents, '
                        '% minimums, % windows, % cool-downs)',
                        n, coalesce(cardinality(p_attempts), 0),
                        coalesce(cardinality(p_failures), 0), coalesce(cardinality(p_percent), 0),
                        coalesce(cardinality(p_min_attempts), 0),
                        coalesce(cardinality(p_window_ms), 0),
                        coalesce(cardinality(p_cool_down_ms), 0)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n > 1000 THEN
        RAISE EXCEPTION 'invalid breaker_record arguments: % kinds in one call (at most 1000)', n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT k.kind, job.name_problem(k.kind) AS problem INTO r
    FROM unnest(p_kinds) AS k(kind)
    WHERE job.name_problem(k.kind) IS NOT NULL
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'invalid breaker_record kind %: %', coalesce(quote_literal(r.kind), 'null'),
                        r.problem
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT k.kind INTO r
    FROM unnest(p_kinds) AS k(kind)
    GROUP BY k.kind HAVING count(*) > 1
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'invalid breaker_record arguments: kind `%` is named more than once '
                        '(one call counts each kind once)', r.kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.kind, c.attempts, c.failures INTO r
    FROM unnest(p_kinds, p_attempts, p_failures) AS c(kind, attempts, failures)
    WHERE c.attempts IS NULL OR c.attempts NOT BETWEEN 0 AND 4294967295
       OR c.failures IS NULL OR c.failures NOT BETWEEN 0 AND c.attempts
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'invalid breaker_record counts for kind `%`: % attempts and % failures '
                        '(one call counts 0 to 4294967295 attempts, and at most as many failures)',
                        r.kind, coalesce(r.attempts::text, 'null'),
                        coalesce(r.failures::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

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
            attempts        = least(CASE WHEN now() >= b.window_start + b.window_ms * interval '1 millisecond'
                                         THEN 0 ELSE b.attempts END::numeric + excluded.attempts,
                                    4611686018427387904)::bigint,
            failures        = least(CASE WHEN now() >= b.window_start + b.window_ms * interval '1 millisecond'
                                         THEN 0 ELSE b.failures END::numeric + excluded.failures,
                                    4611686018427387904)::bigint
        RETURNING * INTO cur;

        CONTINUE WHEN cur.attempts < cur.min_attempts
                   OR cur.failures::numeric * 100 < cur.failure_percent::numeric * cur.attempts;

        why := format('circuit breaker: %s of %s attempts failed (%s%%) in the window since %s; '
                      'it trips at %s%% of at least %s attempts per %s ms',
                      cur.failures, cur.attempts, trunc(cur.failures::numeric * 100 / cur.attempts),
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
            trips = least(trips::numeric + least(written, 1), 9223372036854775807)::bigint,
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

-- CREATE OR REPLACE keeps the function's owner and grants (REVOKE FROM PUBLIC, and the
-- worker roles' EXECUTE of migration 0032).

-- A row repaired here is checked against every constraint of the table, the NOT VALID ones
-- of migration 0022 included: a time it holds out of their range (a raw write before 0022) is
-- repaired with it (`tripped_at` to null: not known).
UPDATE job.breakers
SET attempts = 0, failures = 0, window_start = now(),
    tripped_at = CASE WHEN tripped_at >= '0001-01-01 00:00:00+00'
                           AND tripped_at < '10000-01-01 00:00:00+00' THEN tripped_at END
WHERE attempts < 0 OR failures < 0 OR failures > attempts OR attempts > 4611686018427387904;

ALTER TABLE job.breakers ADD CONSTRAINT breakers_counts_check
    CHECK (attempts BETWEEN 0 AND 4611686018427387904 AND failures BETWEEN 0 AND attempts);
