-- Claims up to $5 available jobs of the rate-limited kind $2 in queue $1 for worker $6, at
-- most $7 starts per key in any window of $8 milliseconds, and records their starts, in one
-- statement. $3: the newest payload version the worker decodes; $4: the lease in
-- milliseconds; $9: the kind's concurrency limit (null: none). The caller holds the kind's
-- advisory lock (claim_lock.sql, an earlier statement of the same transaction), so no other
-- claim of the kind runs meanwhile and every earlier one has committed its starts; the window
-- ends at clock_timestamp(), read under that lock.
--
-- Each rate key with waiting jobs is found by one probe of jobs_rate_key_version_idx (a loose
-- index scan), at most 256 keys per claim, in rotation: the scan starts after the key where
-- the previous claim of the kind stopped (job.rate_cursors) and wraps around, so the claim's
-- cost is bounded however many keys wait, and every key is looked at in turn. Each gives up to
-- its room (its limit less its starts in the window, job.rate_windows, and at most the claim's
-- own limit) of its jobs in claim order; a key at its limit reads nothing. Within a key, the
-- payload versions this worker decodes are found by one probe each and each version's jobs
-- read in claim order, then merged (migration 0051), so the jobs of a newer version (a rolling
-- deploy's) are never read. So a claim reads at most its keys and, for each, its versions and
-- what the claim could take, whatever waits behind them (tests/store_claim.rs measures it on
-- the statement's plans). The starts are stamped with clock_timestamp() once the rows are
-- updated, so no start is stamped before it happened. Jobs without a key share the window of
-- key '': they are looked for among the kind's first 100 available jobs this worker could
-- take, per version it decodes (jobs_claim_version_idx), so a kind whose jobs have keys
-- should give every job one. Jobs of a decodable version that no worker could take (past
-- their deadline, cancelled, at the last attempt count) are passed over before those 100 are
-- counted (100 of them at the head of the kind stopped its jobs without a key for good), so
-- they are read ahead of what is taken: they wait for the expirer and the cancel. The rows
-- are merged in the claim's order (priority, run_at, id). No SKIP LOCKED: claims of the kind
-- are serialized, and the update re-checks that each row is still available.
--
-- Its plan is estimated far above jit_above_cost (the per-key limits are parameters):
-- claim_lock.sql, earlier in the same transaction, turns JIT off for the transaction.
WITH RECURSIVE cursor AS MATERIALIZED (
    SELECT coalesce((SELECT c.after_key FROM job.rate_cursors c
                     WHERE c.kind = $2::text AND c.queue = $1::text), '') AS after_key
),
-- The keys after the cursor, then from the first key up to the cursor: each a loose scan that
-- stops once enough keys were read (a recursive query runs only as far as it is read).
keys_after AS (
    (SELECT j.rate_key FROM job.jobs j
     WHERE j.queue = $1::text AND j.kind = $2::text
       AND j.state = 'available' AND j.rate_key IS NOT NULL
       AND j.rate_key > (SELECT after_key FROM cursor)
     ORDER BY j.rate_key LIMIT 1)
    UNION ALL
    SELECT (SELECT j.rate_key FROM job.jobs j
            WHERE j.queue = $1::text AND j.kind = $2::text
              AND j.state = 'available' AND j.rate_key IS NOT NULL
              AND j.rate_key > k.rate_key
            ORDER BY j.rate_key LIMIT 1)
    FROM keys_after k
    WHERE k.rate_key IS NOT NULL
),
-- Each step takes the next key and only then compares it with the cursor: a comparison inside
-- the scan would read on through every row past the cursor to find none.
keys_before AS (
    (SELECT f.rate_key
     FROM (SELECT j.rate_key FROM job.jobs j
           WHERE j.queue = $1::text AND j.kind = $2::text
             AND j.state = 'available' AND j.rate_key IS NOT NULL
           ORDER BY j.rate_key LIMIT 1) f
     WHERE f.rate_key <= (SELECT after_key FROM cursor))
    UNION ALL
    SELECT (SELECT f.rate_key
            FROM (SELECT j.rate_key FROM job.jobs j
                  WHERE j.queue = $1::text AND j.kind = $2::text
                    AND j.state = 'available' AND j.rate_key IS NOT NULL
                    AND j.rate_key > k.rate_key
                  ORDER BY j.rate_key LIMIT 1) f
            WHERE f.rate_key <= (SELECT after_key FROM cursor))
    FROM keys_before k
    WHERE k.rate_key IS NOT NULL
),
ka AS MATERIALIZED (
    SELECT rate_key FROM keys_after WHERE rate_key IS NOT NULL LIMIT 256
),
kb AS MATERIALIZED (
    SELECT rate_key FROM keys_before
    WHERE rate_key IS NOT NULL
    LIMIT 256 - (SELECT count(*) FROM ka)
),
keys AS (
    SELECT rate_key FROM ka UNION ALL SELECT rate_key FROM kb
),
-- Where the next claim starts: after the last key read, in the order read.
moved AS (
    INSERT INTO job.rate_cursors AS c (kind, queue, after_key)
    SELECT $2::text, $1::text,
           coalesce((SELECT max(rate_key) FROM kb), (SELECT max(rate_key) FROM ka), '')
    ON CONFLICT (kind, queue) DO UPDATE SET after_key = excluded.after_key
),
go AS MATERIALIZED (
    SELECT t.now - $8::bigint * interval '1 millisecond' AS since, t.now,
           CASE WHEN $9::integer IS NULL THEN $5::integer
                ELSE least($5::integer,
                           $9::integer - (SELECT count(*) FROM job.jobs r
                                          WHERE r.locked_until IS NOT NULL
                                            AND r.kind = $2::text)::integer)
           END AS room
    FROM (SELECT clock_timestamp() AS now) t
    WHERE NOT EXISTS (SELECT 1 FROM job.pauses p
                      WHERE p.scope = 'kind' AND p.name = $2::text
                        AND (p.resume_at IS NULL OR p.resume_at > now()))
      AND NOT EXISTS (SELECT 1 FROM job.pauses p
                      WHERE p.scope = 'queue' AND p.name = $1::text
                        AND (p.resume_at IS NULL OR p.resume_at > now()))
),
-- A key's room: its limit less its starts in the window, and never more than the claim's, so
-- that no key reads more of its jobs than the claim could take. A key whose N-th newest start
-- (written with the same limit N by the claim that last took from it) is still inside the
-- window holds N starts: no room, and its starts are not read (migration 0030). A start after
-- the window's end was stamped before the server's clock stepped back: it is not counted, and
-- the key's next claim forgets it, rather than hold the key's room until the clock is past it.
rooms AS MATERIALIZED (
    SELECT k.key,
           least(go.room,
                 $7::integer - coalesce((SELECT CASE
                                             WHEN w.limit_starts = $7::integer
                                                  AND w.limit_start > go.since
                                                  AND w.limit_start <= go.now
                                             THEN $7::integer
                                             ELSE (SELECT count(*)::integer
                                                   FROM unnest(w.starts) AS s(at)
                                                   WHERE s.at > go.since
                                                     AND s.at <= go.now) END
                                         FROM job.rate_windows w
                                         WHERE w.kind = $2::text AND w.rate_key = k.key), 0))
               AS room
    FROM go,
         (SELECT rate_key AS key FROM keys UNION ALL SELECT '') k
),
-- Per key, the payload versions waiting that this worker decodes (at most $3), each found by
-- one probe of jobs_rate_key_version_idx from the newest down (as job.claim does), then each
-- version's jobs in claim order, at most the key's room, merged: the jobs of a newer version
-- are never read.
candidates AS (
    SELECT c.id, c.priority, c.run_at, r.key
    FROM rooms r
    CROSS JOIN LATERAL (
        WITH RECURSIVE versions(version) AS (
            (SELECT j.payload_version
             FROM job.jobs j
             WHERE j.queue = $1::text AND j.kind = $2::text
               AND j.state = 'available' AND j.rate_key = r.key
               AND j.payload_version <= $3::integer
             ORDER BY j.payload_version DESC
             LIMIT 1)
            UNION ALL
            SELECT (SELECT j.payload_version
                    FROM job.jobs j
                    WHERE j.queue = $1::text AND j.kind = $2::text
                      AND j.state = 'available' AND j.rate_key = r.key
                      AND j.payload_version < v.version
                    ORDER BY j.payload_version DESC
                    LIMIT 1)
            FROM versions v
            WHERE v.version IS NOT NULL
        )
        SELECT f.id, f.priority, f.run_at
        FROM versions v
        CROSS JOIN LATERAL (
            SELECT j.id, j.priority, j.run_at
            FROM job.jobs j
            WHERE j.queue = $1::text AND j.kind = $2::text
              AND j.state = 'available' AND j.rate_key = r.key
              AND j.payload_version = v.version
              AND j.run_at <= now()
              AND (j.deadline IS NULL OR j.deadline > now())
              AND NOT j.cancel_requested
              AND j.attempt < 2147483646
            ORDER BY j.priority, j.run_at, j.id
            LIMIT greatest(r.room, 0)
        ) f
        WHERE v.version IS NOT NULL
        ORDER BY f.priority, f.run_at, f.id
        LIMIT greatest(r.room, 0)
    ) c
    WHERE r.key <> '' AND r.room > 0
    UNION ALL
    -- The jobs without a key: among the kind's first 100 jobs this worker could take, per
    -- version it decodes (jobs_claim_version_idx), merged in claim order.
    SELECT c.id, c.priority, c.run_at, ''
    FROM rooms r
    CROSS JOIN LATERAL (
        SELECT f.id, f.priority, f.run_at
        FROM (
            WITH RECURSIVE versions(version) AS (
                (SELECT j.payload_version
                 FROM job.jobs j
                 WHERE j.queue = $1::text AND j.kind = $2::text AND j.state = 'available'
                   AND j.payload_version <= $3::integer
                 ORDER BY j.payload_version DESC
                 LIMIT 1)
                UNION ALL
                SELECT (SELECT j.payload_version
                        FROM job.jobs j
                        WHERE j.queue = $1::text AND j.kind = $2::text
                          AND j.state = 'available'
                          AND j.payload_version < v.version
                        ORDER BY j.payload_version DESC
                        LIMIT 1)
                FROM versions v
                WHERE v.version IS NOT NULL
            )
            SELECT h.id, h.priority, h.run_at, h.rate_key
            FROM versions v
            CROSS JOIN LATERAL (
                SELECT j.id, j.priority, j.run_at, j.rate_key
                FROM job.jobs j
                WHERE j.queue = $1::text AND j.kind = $2::text AND j.state = 'available'
                  AND j.payload_version = v.version
                  AND j.run_at <= now()
                  AND (j.deadline IS NULL OR j.deadline > now())
                  AND NOT j.cancel_requested
                  AND j.attempt < 2147483646
                ORDER BY j.priority, j.run_at, j.id
                LIMIT 100
            ) h
            WHERE v.version IS NOT NULL
            ORDER BY h.priority, h.run_at, h.id
            LIMIT 100) f
        WHERE f.rate_key IS NULL
        ORDER BY f.priority, f.run_at, f.id
        LIMIT greatest(r.room, 0)
    ) c
    WHERE r.key = '' AND r.room > 0
),
picked AS (
    SELECT c.id
    FROM candidates c
    ORDER BY c.priority, c.run_at, c.id
    LIMIT (SELECT greatest(go.room, 0) FROM go)
),
claimed AS (
    UPDATE job.jobs j
    SET state        = 'running',
        attempt      = j.attempt + 1,
        lock_token   = gen_random_uuid(),
        locked_by    = $6::text,
        locked_until = now() + $4::bigint * interval '1 millisecond',
        unique_scope = CASE WHEN j.unique_scope = 'started' THEN 'spent' ELSE j.unique_scope END
    -- By primary key, whatever the planner thinks of the picked rows' number: joined, they
    -- could be matched by a scan of the whole table. The state is compared as text so that
    -- the condition does not match the partial queue index's predicate: planned while the table
    -- was empty (a plan a connection keeps), that index looked cheaper than the primary key,
    -- and the update read every available job of the kind (20,583 rows to update 10). With
    -- claim_lock.sql's `enable_seqscan = off`, the primary key is the one path left.
    WHERE j.id = ANY (ARRAY(SELECT picked.id FROM picked)) AND j.state::text = 'available'
    RETURNING j.id, j.lock_token, j.kind, j.queue, j.priority, j.payload, j.payload_version,
              j.attempt, j.max_attempts, j.snoozes, j.run_at, j.trace_context,
              coalesce(j.rate_key, '') AS key
),
-- Each key's starts still in the window, oldest first, then the new ones (read under the
-- kind's lock: every earlier claim of the kind has committed its own); and its N-th newest
-- start, for the next claim's shortcut above (null: fewer than N).
merged AS (
    SELECT n.key,
           ARRAY(SELECT s.at
                 FROM job.rate_windows w, unnest(w.starts) AS s(at)
                 WHERE w.kind = $2::text AND w.rate_key = n.key
                   AND s.at > clock_timestamp() - $8::bigint * interval '1 millisecond'
                   AND s.at <= clock_timestamp()
                 ORDER BY s.at)
           || array_fill(clock_timestamp(), ARRAY[n.count]) AS starts
    FROM (SELECT key, count(*)::integer AS count FROM claimed GROUP BY key) n
),
recorded AS (
    INSERT INTO job.rate_windows AS w (kind, rate_key, starts, limit_starts, limit_start)
    SELECT $2::text, m.key, m.starts,
           CASE WHEN cardinality(m.starts) >= $7::integer THEN $7::integer END,
           (SELECT s.at FROM unnest(m.starts) AS s(at)
            ORDER BY s.at DESC OFFSET $7::integer - 1 LIMIT 1)
    FROM merged m
    ON CONFLICT (kind, rate_key) DO UPDATE
    SET starts = excluded.starts,
        limit_starts = excluded.limit_starts,
        limit_start = excluded.limit_start,
        updated_at = now()
)
SELECT id, lock_token, kind, queue, priority, payload::text AS payload, payload_version,
       attempt, max_attempts, snoozes, trace_context,
       greatest(0, extract(epoch FROM now() - run_at) * 1000)::bigint AS waited_ms
FROM claimed
ORDER BY priority, run_at, id
