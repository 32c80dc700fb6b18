-- Gives leases back, each guarded by (id, lock_token) and running: available at once, keeping
-- its place (run_at is never moved later), the attempt not counted, the lease and stuck_since
-- cleared. An execution that ran ($3: milliseconds it ran; null: never started) leaves an entry
-- of class `released` in the history, through job.push_error, under the attempt it used.
-- Wakes the queues so another worker takes them now.
-- An execution that ran is released only while the job's `interruptions` (migration 0045) is
-- below $5 (`MAX_REFUNDED_INTERRUPTIONS`), and adds one to it; past that its lease runs out and
-- the rescuer counts the attempt, so that what stops one job again and again cannot retry it
-- for ever.
-- A job given back before its first attempt ever started ($3 null, the refund brings it to
-- attempt 0, and it never snoozed nor has any entry in its history) holds its unique key again when the claim had spent it ('started' becomes 'spent'
-- at the claim): it has not started, so `UntilStarted` still holds it, unless another job took
-- the key meanwhile (that one keeps it). $4 false skips that: the caller's second try after a
-- concurrent enqueue took the key between this statement's snapshot and its write (23505).
WITH u AS (
    SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::bigint[]) AS u(id, token, ran_ms)
),
locked AS MATERIALIZED (
    -- In id order, like heartbeat.sql and finalize.sql: no deadlock between them.
    -- The guard: a matching token implies running (jobs_lease_check).
    SELECT j.id, u.ran_ms
    FROM job.jobs j
    JOIN u ON j.id = u.id AND j.lock_token = u.token
    WHERE u.ran_ms IS NULL OR j.interruptions < $5::integer
    ORDER BY j.id
    FOR NO KEY UPDATE OF j
),
released AS (
    UPDATE job.jobs j
    SET state        = 'available',
        attempt      = j.attempt - 1,
        interruptions = j.interruptions + CASE WHEN l.ran_ms IS NULL THEN 0 ELSE 1 END,
        run_at       = least(j.run_at, now()),
        errors       = CASE WHEN l.ran_ms IS NULL THEN j.errors
                            ELSE job.push_error(j.errors, jsonb_build_object(
                                'attempt', j.attempt,
                                'at', now(),
                                'class', 'released',
                                'message', format('worker %s stopped this attempt after %s ms '
                                                  '(a shutdown, or a lease it could not renew '
                                                  'in time) and released it; the attempt is '
                                                  'not counted',
                                                  coalesce(j.locked_by, '(unknown)'),
                                                  l.ran_ms))) END,
        unique_scope = CASE WHEN $4::boolean AND l.ran_ms IS NULL AND j.attempt = 1
                                 -- never started before either: a snooze and a release
                                 -- after running give the attempt back too, and leave a
                                 -- count or an entry
                                 AND j.snoozes = 0 AND j.errors = '[]'::jsonb
                                 AND j.unique_scope = 'spent' AND j.unique_key IS NOT NULL
                                 AND NOT EXISTS (
                                     SELECT 1 FROM job.jobs a
                                     WHERE a.kind = j.kind AND a.unique_key = j.unique_key
                                       AND a.id <> j.id AND (
                                           a.unique_scope = 'pruned'
                                           OR (a.unique_scope = 'finished'
                                               AND a.state IN ('pending', 'scheduled',
                                                               'available', 'running',
                                                               'retryable'))
                                           OR (a.unique_scope = 'started'
                                               AND a.state IN ('pending', 'scheduled',
                                                               'available', 'retryable'))))
                            THEN 'started' ELSE j.unique_scope END,
        lock_token   = NULL,
        locked_until = NULL,
        locked_by    = NULL,
        stuck_since  = NULL
    FROM locked l
    WHERE j.id = l.id
    RETURNING j.queue
),
woken AS (
    SELECT pg_notify('job_insert', q.queue)
    FROM (SELECT DISTINCT queue FROM released) q
)
SELECT count(*) AS released, (SELECT count(*) FROM woken) AS queues_woken
FROM released
