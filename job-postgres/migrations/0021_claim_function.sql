-- 0021 claim function: the claim statement (formerly the text of sql/claim.sql, sent by the
-- store with each claim) becomes job.claim, a PL/pgSQL function that returns the same rows.
-- Append-only: change the schema in a new numbered file.
--
-- Why a function: PostgreSQL plans a statement sent with parameters anew for every execution
-- while it estimates that plan cheaper than a generic one, and for this statement it mostly
-- does (the generic plan cannot know the claim's LIMIT): a drain of 50,000 jobs planned all
-- 251 of its claims anew. Planning took about 0.9 ms, as long as executing a claim of 50
-- jobs, and most of an idle worker's claim of one. The
-- statement is one bounded index scan per kind whatever the parameters (the plan has no other
-- shape to choose), so the function plans it once per connection: `plan_cache_mode =
-- force_generic_plan` applies to its own statement only, not to the caller's session.
--
-- The function runs with its caller's privileges (SECURITY INVOKER): a role needs the same
-- table privileges to claim as before, and EXECUTE is left to PUBLIC so that a worker role
-- granted those table privileges (README, "Roles and privileges") needs nothing new.
-- search_path is pinned and every object schema-qualified.
--
-- The rows picked are locked (FOR NO KEY UPDATE) until the statement's UPDATE rewrites them,
-- so their ctid cannot change in between: the UPDATE reaches each by its ctid, not through
-- the primary key's index.
--
-- Parameters, as the statement's $1..$8 were: the queue; per kind in lockstep (kinds, versions,
-- leases, caps) its name, newest payload version, lease in milliseconds and cluster-wide
-- limit of running jobs (null: none); the most jobs to claim; the worker's id; the
-- rate-limited kinds of the queue to stay ahead of (empty: none).
--
-- Claims up to $5 available jobs of queue $1 for worker $6 in one statement. Per kind (arrays
-- $2..$4, $7 in lockstep): name, newest payload version, lease in milliseconds, and the
-- cluster-wide limit of running jobs (null: none). Skipped: paused queues and kinds
-- (job.pauses; a breaker's pause until its resume_at), jobs past their deadline (the pruner
-- discards them), jobs whose cancellation
-- was requested (the pruner cancels them). A limited kind takes at most its limit minus its
-- running jobs: the caller holds that kind's advisory lock (claim_lock.sql) in the same
-- transaction, taken in an earlier statement so that this one's snapshot sees every claim made
-- before it.
--
-- Only `available` rows are read (due `scheduled` and `retryable` ones are made available by
-- stage.sql), one bounded scan of jobs_claim_idx per kind that may run: what a claim reads
-- follows what it returns, whatever waits for later, for kinds this worker does not run, for
-- paused kinds or for kinds at their limit. The scans' rows are merged in the claim's order
-- (priority, run_at, id). A unique key held 'started' is spent by the claim.
--
-- $8: rate-limited kinds of the same queue, which claim_rated.sql claims after this statement
-- (empty: none). Only jobs ahead of their first waiting job in claim order are taken then, so
-- that a limited kind's jobs keep their place among the others' instead of coming after them
-- (or before them, were the limited kinds claimed first); lease.rs claims the other kinds
-- again, without the bound, with what the limited kinds left of the limit. The bound is a
-- condition of each kind's index scan (a row comparison on jobs_claim_idx's columns after
-- queue and kind), so the scan stops at it rather than reading the jobs behind it; without
-- $8 it is past every row.

CREATE FUNCTION job.claim(
    in_queue text, in_kinds text[], in_versions integer[], in_leases bigint[],
    in_max integer, in_worker text, in_caps integer[], in_ahead_of text[]
) RETURNS TABLE (
    id bigint, lock_token uuid, kind text, queue text, priority smallint, payload text,
    payload_version integer, attempt integer, max_attempts integer, snoozes integer,
    trace_context text, waited_ms bigint
)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH bound AS MATERIALIZED (
        SELECT coalesce(h.priority, 32767::smallint) AS priority,
               coalesce(h.run_at, 'infinity'::timestamptz) AS run_at,
               coalesce(h.id, 9223372036854775807) AS id
        FROM (SELECT 1) AS one
        LEFT JOIN LATERAL (
            SELECT f.priority, f.run_at, f.id
            FROM unnest($8::text[]) AS r(kind)
            CROSS JOIN LATERAL (
                SELECT j.priority, j.run_at, j.id
                FROM job.jobs j
                WHERE j.queue = $1::text
                  AND j.kind = r.kind
                  AND j.state = 'available'
                ORDER BY j.priority, j.run_at, j.id
                LIMIT 1
            ) f
            ORDER BY 1, 2, 3
            LIMIT 1
        ) h ON true
    ),
    k AS (
        SELECT k.kind, k.version, k.cap
        FROM unnest($2::text[], $3::integer[], $7::integer[]) AS k(kind, version, cap)
        WHERE NOT EXISTS (SELECT 1 FROM job.pauses p
                          WHERE p.scope = 'kind' AND p.name = k.kind
                            AND (p.resume_at IS NULL OR p.resume_at > now()))
          AND NOT EXISTS (SELECT 1 FROM job.pauses p
                          WHERE p.scope = 'queue' AND p.name = $1::text
                            AND (p.resume_at IS NULL OR p.resume_at > now()))
    ),
    -- Running rows of a limited kind are counted through jobs_rescue_idx (locked_until IS NOT
    -- NULL is running, by jobs_lease_check): no extra index on the hot path.
    room AS MATERIALIZED (
        SELECT k.kind, k.version,
               CASE WHEN k.cap IS NULL THEN $5::integer
                    ELSE least($5::integer,
                               k.cap - (SELECT count(*) FROM job.jobs r
                                        WHERE r.locked_until IS NOT NULL AND r.kind = k.kind)::integer)
               END AS room,
               bound.priority AS before_priority, bound.run_at AS before_run_at,
               bound.id AS before_id
        FROM k
        CROSS JOIN bound
    ),
    picked AS (
        SELECT c.tid, c.id, c.priority, c.run_at
        FROM room
        CROSS JOIN LATERAL (
            SELECT j.ctid AS tid, j.id, j.priority, j.run_at
            FROM job.jobs j
            WHERE j.queue = $1::text
              AND j.kind = room.kind
              AND j.state = 'available'
              AND (j.priority, j.run_at, j.id)
                  < (room.before_priority, room.before_run_at, room.before_id)
              AND j.run_at <= now()
              AND j.payload_version <= room.version
              AND (j.deadline IS NULL OR j.deadline > now())
              AND NOT j.cancel_requested
            ORDER BY j.priority, j.run_at, j.id
            LIMIT room.room
            FOR NO KEY UPDATE SKIP LOCKED
        ) c
        WHERE room.room > 0
        ORDER BY c.priority, c.run_at, c.id
        LIMIT $5::integer
    ),
    claimed AS (
        UPDATE job.jobs j
        SET state        = 'running',
            attempt      = j.attempt + 1,
            lock_token   = gen_random_uuid(),
            locked_by    = $6::text,
            locked_until = now()
                + ($4::bigint[])[array_position($2::text[], j.kind)] * interval '1 millisecond',
            unique_scope = CASE WHEN j.unique_scope = 'started' THEN 'spent' ELSE j.unique_scope END
        FROM picked
        WHERE j.ctid = picked.tid
        RETURNING j.id, j.lock_token, j.kind, j.queue, j.priority, j.payload, j.payload_version,
                  j.attempt, j.max_attempts, j.snoozes, j.run_at, j.trace_context
    )
    SELECT id, lock_token, kind, queue, priority, payload::text AS payload, payload_version,
           attempt, max_attempts, snoozes, trace_context,
           greatest(0, extract(epoch FROM now() - run_at) * 1000)::bigint AS waited_ms
    FROM claimed
    ORDER BY priority, run_at, id;
END
$claim$;
