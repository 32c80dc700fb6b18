-- Cancels job $1 unless it has finished: a waiting job becomes cancelled at once (finalized,
-- a `cancelled` entry appended to its history); a running one keeps running with
-- cancel_requested set, which its worker's next heartbeat turns into the handler's cancel
-- signal. The entry is appended through job.push_error, which keeps the history bounded.
-- Returns the state after the update; no row when the job is finished or absent, or
-- belongs to another tenant than $2 (null: any).
UPDATE job.jobs j
SET state            = CASE WHEN j.state = 'running' THEN j.state
                            ELSE 'cancelled' END::job.job_state,
    cancel_requested = true,
    finalized_at     = CASE WHEN j.state = 'running' THEN NULL ELSE now() END,
    errors           = CASE WHEN j.state = 'running' THEN j.errors
                            ELSE job.push_error(j.errors, jsonb_build_object(
                                'attempt', j.attempt,
                                'at', now(),
                                'class', 'cancelled',
                                'message', 'cancelled by an operator')) END
WHERE j.id = $1::bigint AND ($2::text IS NULL OR j.tenant = $2::text)
  AND j.state NOT IN ('completed', 'cancelled', 'discarded')
RETURNING j.state::text
