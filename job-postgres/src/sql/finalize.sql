-- Applies many outcomes, each guarded by (id, lock_token); a matching token implies running
-- (the jobs_lease_check constraint). Per item: the target
-- state; a delay in milliseconds from now for the next run (null keeps run_at); whether the
-- attempt is refunded (snooze); an error to append through job.push_error, which keeps the
-- history bounded (null class appends nothing; a null attempt means the current one); the
-- job's result as JSON text, stored when the item completes the job. Terminal states get
-- finalized_at; every lease is cleared, and with it stuck_since.
-- Returns the ordinality of each item applied, and the state written (a discard may have been
-- written as a cancellation: below). A row another transaction holds (an
-- application's or an operator's, left open) is skipped rather than waited for, so that one
-- held row holds up no other outcome: an item not returned lost its lease or was skipped, which
-- finalize_busy.sql tells apart (the caller writes a skipped one again later).
-- Rows are locked in id order first (the `locked` step), as heartbeat.sql and release.sql do.
WITH u AS (
    SELECT *
    FROM unnest(
             $1::bigint[], $2::uuid[], $3::text[], $4::bigint[], $5::boolean[],
             $6::integer[], $7::text[], $8::text[], $9::text[]
         ) WITH ORDINALITY AS u(id, token, state, delay_ms, snooze,
                                error_attempt, error_class, error_message, result, ord)
),
-- The guard, and the outcome carried along, so the UPDATE joins by primary key only: a join
-- of the batch against every running row can be planned as a nested loop over all of them.
-- A discard of a job whose cancel was requested ends it cancelled: the worker learns of a
-- request only at its next heartbeat, so its last attempt may end with an error before then,
-- and a dead letter would fire the compensation the cancel did not ask for, and wait in the
-- dead letters for a redrive (the rescuer and the expirer do the same). Read from the locked
-- row.
locked AS MATERIALIZED (
    SELECT j.id,
           CASE WHEN u.state = 'discarded' AND j.cancel_requested THEN 'cancelled'
                ELSE u.state END AS state,
           u.delay_ms, u.snooze, u.error_attempt, u.error_class,
           u.error_message, u.result, u.ord
    FROM job.jobs j
    JOIN u ON j.id = u.id AND j.lock_token = u.token
    ORDER BY j.id
    FOR NO KEY UPDATE OF j SKIP LOCKED
)
UPDATE job.jobs j
SET state        = u.state::job.job_state,
    run_at       = CASE WHEN u.delay_ms IS NULL THEN j.run_at
                        ELSE now() + u.delay_ms * interval '1 millisecond' END,
    attempt      = CASE WHEN u.snooze THEN j.attempt - 1 ELSE j.attempt END,
    snoozes      = CASE WHEN u.snooze THEN j.snoozes + 1 ELSE j.snoozes END,
    errors       = CASE WHEN u.error_class IS NULL THEN j.errors
                        ELSE job.push_error(j.errors, jsonb_build_object(
                            'attempt', coalesce(u.error_attempt, j.attempt),
                            'at', now(),
                            'class', u.error_class,
                            'message', u.error_message)) END,
    finalized_at = CASE WHEN u.state IN ('completed', 'cancelled', 'discarded') THEN now() END,
    result       = CASE WHEN u.state = 'completed' THEN u.result::jsonb END,
    lock_token   = NULL,
    locked_until = NULL,
    locked_by    = NULL,
    stuck_since  = NULL
FROM locked u
WHERE j.id = u.id
RETURNING u.ord, u.state
