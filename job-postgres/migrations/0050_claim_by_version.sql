-- 0050 claim_by_version: a claim never reads the jobs of a payload version newer than its
-- worker decodes. Append-only: change the schema in a new numbered file.
--
-- job.claim read each kind's available jobs through jobs_claim_idx (queue, kind, priority,
-- run_at, id) and compared payload_version on the table row. During a rolling deploy the new
-- release enqueues jobs of version 2 while workers of the old one, which decode version 1
-- only, still claim: every claim of theirs, idle polls included, read every waiting job of
-- version 2 of the kind (100,000 of them: 20-29 ms a claim on a scratch database, growing with
-- the backlog), and every enqueue's notification woke each old worker to read them again.
--
-- jobs_claim_version_idx puts payload_version after kind. Per kind, the claim finds the
-- versions it decodes that have available jobs (one index probe each, the loose index scan of
-- claim_rated.sql's keys; an application keeps a handful of versions of a kind at once), reads
-- each version's jobs in claim order, at most the kind's room, and merges them in that order.
-- So it reads what it returns and one probe per version, whatever waits of a newer version.
-- Each version's scan locks its rows before the merge keeps the kind's room of them, as the
-- kinds' scans already did before the claim's own LIMIT: the rows it locked and left are
-- free again when the claim's transaction ends, and other claims skip them meanwhile.
--
-- The update reaches the picked rows by their row addresses as an array (a TID scan), not by
-- joining the picked set: the versions' merge is planned as many rows, and a join with as
-- many was planned as a hash join over a scan of the whole table (20,003 rows read to claim 3).
--
-- jobs_claim_idx stays: the rate-limited claim, the bound on the rate-limited kinds (job.claim's
-- `bound`), the limited kinds' due check, the reporter and the dashboard read a kind's jobs in
-- claim order whatever their version. The rate-limited claim (claim_rated.sql) still reads
-- the jobs of a newer version ahead of what it takes (its header says so).
--
-- The index holds only the available rows, but building it reads the whole table, in this
-- migration's transaction (CREATE INDEX CONCURRENTLY cannot run in one): writes to job.jobs
-- wait while it builds, so on a large table apply it when the queue is quiet.

CREATE INDEX jobs_claim_version_idx ON job.jobs (queue, kind, payload_version, priority, run_at, id)
    WHERE state = 'available';

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
