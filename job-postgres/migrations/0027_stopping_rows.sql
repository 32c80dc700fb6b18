-- 0027 rows that stopped everyone: three raw writes that every door let in, after which a
-- statement the framework runs for every job of a queue (or of the database) failed, on every
-- pass. Append-only: change the schema in a new numbered file.
--
-- 1. A waiting row at `attempt` 2,147,483,646 (the largest jobs_attempt_check leaves a
--    waiting row): the claim counts the attempt, writes 2,147,483,647, which the check
--    refuses, and the whole claim of the row's queue failed, whatever else it picked. The
--    claim now passes over such a row (job.claim here, claim_rated.sql), as SQLite's does: it
--    can never run, and it stops nothing. (The same bound, one lower, is not put on waiting
--    rows: the rescuer and the completer write running rows back as waiting ones.)
-- 2. A running row whose unique scope is still `started` (only the claim turns it to `spent`,
--    and a raw write skips the claim): a new job with the same key is admitted (running rows
--    are outside jobs_unique_idx's `started` scope), and the rescue that brings the running
--    row back to retryable breaks the unique index. The rescue is one statement for every
--    kind, so no expired lease of any kind was rescued any more; a release batch holding the
--    row failed the same way. Such rows are repaired (`spent`, as the claim would have made
--    them: read through jobs_rescue_idx, which holds the running rows), and refused from now on.
-- 3. A head of an ordering key whose key was changed, or which was moved back to `pending`, by
--    a raw UPDATE: no trigger released the key, so its pending jobs waited until another job
--    of the key was enqueued. The release now fires whenever a head leaves the head states or
--    its key (jobs_ordering_release_left replaces jobs_ordering_release_finished; finishing is
--    leaving the head states).

CREATE OR REPLACE FUNCTION job.claim(in_queue text, in_kinds text[], in_versions integer[], in_leases bigint[], in_max integer, in_worker text, in_caps integer[], in_ahead_of text[])
 RETURNS TABLE(id bigint, lock_token uuid, kind text, queue text, priority smallint, payload text, payload_version integer, attempt integer, max_attempts integer, snoozes integer, trace_context text, waited_ms bigint)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
AS $function$
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
              AND j.attempt < 2147483646
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
$function$;

UPDATE job.jobs SET unique_scope = 'spent'
WHERE locked_until IS NOT NULL AND state = 'running' AND unique_scope = 'started';

-- NOT VALID: the rows it could refuse were just repaired, and the table is not scanned under
-- the lock. Every insert and update is checked.
ALTER TABLE job.jobs ADD CONSTRAINT jobs_running_scope_check
    CHECK (state <> 'running' OR unique_scope IS DISTINCT FROM 'started') NOT VALID;

DROP TRIGGER jobs_ordering_release_finished ON job.jobs;

CREATE TRIGGER jobs_ordering_release_left
    AFTER UPDATE OF state, ordering_key ON job.jobs
    FOR EACH ROW WHEN (OLD.ordering_key IS NOT NULL
                       AND OLD.state IN ('scheduled', 'available', 'running', 'retryable')
                       AND (NEW.state NOT IN ('scheduled', 'available', 'running', 'retryable')
                            OR NEW.ordering_key IS DISTINCT FROM OLD.ordering_key))
    EXECUTE FUNCTION job.ordering_release();
