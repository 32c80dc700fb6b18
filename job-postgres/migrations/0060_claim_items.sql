-- 0060 claim_items: job.claim refuses items of its kind arrays no worker sends, and a worker
-- id its leases cannot carry, naming the argument. Append-only: change the schema in a new
-- numbered file.
--
-- Migration 0055 made job.claim refuse NULL arguments, arrays out of lockstep and leases out
-- of bounds; the items of the other arrays, and the worker's id, were left as the worker sends
-- them. Called by hand or by another client (a probe of the SQL doors):
--
-- * a kind named twice got its own room per item, so a kind capped at 1 running job claimed
--   two, and the second item's lease was replaced by the first's (array_position finds the
--   first);
-- * an `in_worker` over 128 bytes claimed nothing while nothing was due, then failed every
--   claim on jobs_locked_by_check, with the whole row in the error's detail and the whole
--   statement in its context, naming neither the argument nor the worker;
-- * a NULL kind or version, a version below 1 and a negative cap claimed nothing, without a
--   word.
--
-- Each is now refused with 22023 naming the argument, in 0055's words. The worker sends none
-- of them (the builder refuses a kind registered twice, a version below 1, a cap below 1 and
-- an id over 128 bytes). A cap of 0 is still taken (it claims nothing of its kind), as is an
-- empty kind array. The checks are plain PL/pgSQL before the statement, which is unchanged:
-- each reads the arrays the worker sends, one item per kind of the queue.
--
-- As in migration 0055, with those checks before the statement. CREATE OR REPLACE keeps the
-- function's owner and grants and sets its settings anew.

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
    IF octet_length(in_worker) NOT BETWEEN 1 AND 128 THEN
        RAISE EXCEPTION 'invalid claim argument `in_worker`: must be 1 to 128 bytes (the '
                        'worker''s id, which its leases carry), got %', octet_length(in_worker)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(in_kinds) AS k(kind)
               GROUP BY k.kind HAVING k.kind IS NULL OR count(*) > 1) THEN
        RAISE EXCEPTION 'invalid claim argument `in_kinds`: each kind must be named once and '
                        'not be null (its version, lease and cap are found by its position), '
                        'got %',
            (SELECT CASE WHEN k.kind IS NULL THEN 'null'
                         ELSE format('`%s` %s times', job.shown(k.kind), count(*)) END
             FROM unnest(in_kinds) AS k(kind)
             GROUP BY k.kind HAVING k.kind IS NULL OR count(*) > 1 LIMIT 1)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(in_versions) AS v(version)
               WHERE v.version IS NULL OR v.version < 1) THEN
        RAISE EXCEPTION 'invalid claim argument `in_versions`: each version must be 1 or more '
                        '(the newest payload version the worker decodes), got %',
            (SELECT coalesce(v.version::text, 'null') FROM unnest(in_versions) AS v(version)
             WHERE v.version IS NULL OR v.version < 1 LIMIT 1)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(in_caps) AS c(cap) WHERE c.cap < 0) THEN
        RAISE EXCEPTION 'invalid claim argument `in_caps`: each cap must be null (no limit) or '
                        '0 or more (the most running jobs of its kind), got %',
            (SELECT c.cap FROM unnest(in_caps) AS c(cap) WHERE c.cap < 0 LIMIT 1)
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
