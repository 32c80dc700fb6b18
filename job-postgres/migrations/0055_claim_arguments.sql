-- 0055 claim_arguments: job.claim names the argument it refuses. Append-only: change the
-- schema in a new numbered file.
--
-- Migrations 0052 and 0054 made the stager's and the rescuer's functions refuse a negative or
-- NULL count, naming it; job.claim, the worker's own function, was left as it was. Called by
-- hand or by another client: `in_max` -1 failed with "LIMIT must not be negative", and NULL
-- claimed nothing of a kind without a cap and a capped kind's free room (least(NULL, room));
-- a lease of 0 or less claimed jobs whose lease had already run out (the rescuer then gave
-- them back, a claim for nothing); a NULL lease, or a lease array shorter than the kinds',
-- failed on the table's jobs_lease_check with the row in the error's detail, and longer
-- arrays, or versions or caps of another length, were padded with NULL (a kind without a
-- version claimed nothing, one without a cap had none); a NULL queue or kind array claimed
-- nothing, and a NULL worker wrote a lease without a holder, without a word.
--
-- It now refuses, with 22023 naming the argument, in the words of 0052 and 0054: a NULL
-- argument; `in_kinds`, `in_versions`, `in_leases` and `in_caps` that are not one-dimensional
-- arrays from 1 of one length (one item per kind, in lockstep: each kind's lease is found by
-- its position); a lease, in milliseconds, below 1 or above 100 years (job::MAX_DURATION, the
-- longest a worker's `build()` takes); and `in_max` NULL or below 0. No upper bound on
-- `in_max`: the worker sends its batch, a u32 capped at 2,147,483,647. An item of an array
-- may still be NULL where that claims nothing (a kind, a version) or means no limit (a cap),
-- as the worker sends it. The checks are plain PL/pgSQL expressions before the statement,
-- which is unchanged: nothing the claim's plan or its cost per row depends on. The claim of
-- a rate-limited kind is a statement the worker sends (claim_rated.sql), not this function,
-- and is not checked here; the worker never sends a lease outside these bounds (`build()`
-- refuses them).
--
-- As in migration 0050, with those checks first. CREATE OR REPLACE keeps the function's owner
-- and grants and sets its settings anew.

CREATE OR REPLACE FUNCTION job.claim(in_queue text, in_kinds text[], in_versions integer[], in_leases bigint[], in_max integer, in_worker text, in_caps integer[], in_ahead_of text[])
 RETURNS TABLE(id bigint, lock_token uuid, kind text, queue text, priority smallint, payload text, payload_version integer, attempt integer, max_attempts integer, snoozes integer, trace_context text, waited_ms bigint)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET jit TO 'off'
AS $function$
#variable_conflict use_column
BEGIN
    IF in_max IS NULL OR in_max < 0 THEN
        RAISE EXCEPTION 'invalid claim argument `in_max`: must be 0 or more (the most jobs to '
                        'claim), got %', coalesce(in_max::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF in_queue IS NULL OR in_kinds IS NULL OR in_versions IS NULL OR in_leases IS NULL
       OR in_worker IS NULL OR in_caps IS NULL OR in_ahead_of IS NULL THEN
        RAISE EXCEPTION 'invalid claim argument `%`: must not be null',
            CASE WHEN in_queue IS NULL THEN 'in_queue'
                 WHEN in_kinds IS NULL THEN 'in_kinds'
                 WHEN in_versions IS NULL THEN 'in_versions'
                 WHEN in_leases IS NULL THEN 'in_leases'
                 WHEN in_worker IS NULL THEN 'in_worker'
                 WHEN in_caps IS NULL THEN 'in_caps'
                 ELSE 'in_ahead_of' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(in_versions) <> cardinality(in_kinds)
       OR cardinality(in_leases) <> cardinality(in_kinds)
       OR cardinality(in_caps) <> cardinality(in_kinds)
       OR (cardinality(in_kinds) > 0
           AND (array_ndims(in_kinds) <> 1 OR array_lower(in_kinds, 1) <> 1
                OR array_ndims(in_versions) <> 1 OR array_lower(in_versions, 1) <> 1
                OR array_ndims(in_leases) <> 1 OR array_lower(in_leases, 1) <> 1
                OR array_ndims(in_caps) <> 1 OR array_lower(in_caps, 1) <> 1)) THEN
        RAISE EXCEPTION 'invalid claim arguments `in_kinds`, `in_versions`, `in_leases`, '
                        '`in_caps`: must be one-dimensional arrays from 1 of one length (one '
                        'item per kind), got %, %, %, %',
            coalesce(array_dims(in_kinds), 'empty'), coalesce(array_dims(in_versions), 'empty'),
            coalesce(array_dims(in_leases), 'empty'), coalesce(array_dims(in_caps), 'empty')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(in_leases) AS l(ms)
               WHERE l.ms IS NULL OR l.ms < 1 OR l.ms > 3153600000000) THEN
        RAISE EXCEPTION 'invalid claim argument `in_leases`: each lease must be 1 to '
                        '3153600000000 milliseconds (100 years), got %',
            (SELECT coalesce(l.ms::text, 'null') FROM unnest(in_leases) AS l(ms)
             WHERE l.ms IS NULL OR l.ms < 1 OR l.ms > 3153600000000 LIMIT 1)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
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
    -- Per kind, the payload versions waiting that this worker decodes (at most room.version),
    -- each found by one probe of jobs_claim_version_idx (a loose index scan), then each
    -- version's jobs read in claim order and the versions' rows merged: the jobs of a newer
    -- version are never read. The probes go from the newest version down: each lands on the
    -- end of its version's range, among the jobs enqueued last, where an ascending probe
    -- would start at the jobs claimed first and step over their index entries until a
    -- VACUUM removes them, as the version's own scan then does once more.
    picked AS (
        SELECT c.tid, c.id, c.priority, c.run_at
        FROM room
        CROSS JOIN LATERAL (
            WITH RECURSIVE versions(version) AS (
                (SELECT j.payload_version
                 FROM job.jobs j
                 WHERE j.queue = $1::text
                   AND j.kind = room.kind
                   AND j.state = 'available'
                   AND j.payload_version <= room.version
                 ORDER BY j.payload_version DESC
                 LIMIT 1)
                UNION ALL
                SELECT (SELECT j.payload_version
                        FROM job.jobs j
                        WHERE j.queue = $1::text
                          AND j.kind = room.kind
                          AND j.state = 'available'
                          AND j.payload_version < v.version
                        ORDER BY j.payload_version DESC
                        LIMIT 1)
                FROM versions v
                WHERE v.version IS NOT NULL
            )
            SELECT f.tid, f.id, f.priority, f.run_at
            FROM versions v
            CROSS JOIN LATERAL (
                SELECT j.ctid AS tid, j.id, j.priority, j.run_at
                FROM job.jobs j
                WHERE j.queue = $1::text
                  AND j.kind = room.kind
                  AND j.state = 'available'
                  AND j.payload_version = v.version
                  AND (j.priority, j.run_at, j.id)
                      < (room.before_priority, room.before_run_at, room.before_id)
                  AND j.run_at <= now()
                  AND (j.deadline IS NULL OR j.deadline > now())
                  AND NOT j.cancel_requested
                  AND j.attempt < 2147483646
                ORDER BY j.priority, j.run_at, j.id
                LIMIT room.room
                FOR NO KEY UPDATE SKIP LOCKED
            ) f
            WHERE v.version IS NOT NULL
            ORDER BY f.priority, f.run_at, f.id
            LIMIT room.room
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
        WHERE j.ctid = ANY (ARRAY(SELECT picked.tid FROM picked))
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
