-- Puts up to $9 dead letters matching the filter of job_filter.sql ($1..$8, $10) back to available with fresh
-- attempts (attempt 0, snoozes 0, interruptions 0, due now, no deadline, cancellation cleared;
-- errors kept).
-- Through the unique guard: a dead letter whose key an active job holds (any row inside
-- jobs_unique_idx's predicate) is skipped and reported with that job's id; of several dead
-- letters sharing a key only the newest goes back, the others are reported with its id.
-- A key spent by a start ('spent') is held 'started' again. A concurrent enqueue that takes a
-- key after this statement's snapshot makes the index refuse the statement (23505): the caller
-- runs it again. Returns per dead letter (id, redriven, existing), and wakes the queues.
--
-- Dependencies (migration 0013) are waited for again, both ways:
--
-- * A dead letter that depends on other jobs waits for them again when one of them no longer
--   satisfies its edge (a job it needs completed that is not, say one discarded and redriven
--   with it): those edges are opened again and the job goes back to `pending`, for the stager
--   to promote or discard as for a new dependent. An edge whose job did not satisfy it when it
--   was resolved (`satisfied = false`, migration 0031: a `depends_on` job cancelled, discarded
--   or deleted) is opened again even when that job no longer exists: read as "completed and
--   pruned since", a dependent discarded because its dependency was cancelled ran once that
--   dependency had been pruned. The stager then discards it again, naming the job as deleted.
--   The other edges stay resolved: a job that completed (`satisfied = true`) and was pruned
--   since is not waited for again, nor a deleted one of an edge resolved before migration
--   0031 (`satisfied` null, not known).
-- * A pending job that waits for a dead letter redriven here (a batch's callback, one of whose
--   members is redriven) waits for it again: its edges pointing at that job are opened again.
--   Left resolved, the callback ran once its other members had finished, beside the member
--   redriven and still running, and never saw that member's outcome. Edges are written under
--   their dependent's row lock (job.dependencies_resolve): such dependents are locked first
--   (FOR NO KEY UPDATE, in id order; a stager pass holding one is waited for), and only those
--   still pending once locked have their edges opened. A stager pass that read the member as
--   ended before this statement committed cannot resolve the edge again from that snapshot: it
--   skips the dependent while this statement holds it, and its statements after taking the
--   lock see the edge opened. Every edge pointing at the job is opened, resolved or not as
--   this statement's snapshot saw it (a pass may have resolved it since).
--
-- One UPDATE of job.dependencies does both (two data-modifying CTEs must not update the same
-- rows).
--
-- A dead letter with an ordering key goes back through the admit trigger, which takes its
-- key's lock. The keys' locks are all taken first, in the order every bulk enqueue takes them
-- (job.ordering_lock_keys), before any row is updated: taken row by row, in the UPDATE's
-- order, they deadlocked with an application's bulk enqueue of the same keys, and the server
-- could cancel the application's transaction.
WITH dead AS (
    SELECT j.id, j.kind, j.unique_key
-- @dead_letters
),
ranked AS (
    SELECT d.id, d.unique_key,
           (SELECT a.id FROM job.jobs a
            WHERE d.unique_key IS NOT NULL AND a.kind = d.kind AND a.unique_key = d.unique_key
              AND a.id <> d.id AND (
                  a.unique_scope = 'pruned'
                  OR (a.unique_scope = 'finished'
                      AND a.state IN ('pending', 'scheduled', 'available', 'running',
                                      'retryable'))
                  OR (a.unique_scope = 'started'
                      AND a.state IN ('pending', 'scheduled', 'available', 'retryable')))
            LIMIT 1) AS holder,
           CASE WHEN d.unique_key IS NULL THEN d.id
                ELSE first_value(d.id) OVER (PARTITION BY d.kind, d.unique_key ORDER BY d.id DESC)
           END AS first
    FROM dead d
),
chosen AS (
    SELECT r.id FROM ranked r WHERE r.holder IS NULL AND r.first = r.id
),
waiting AS (
    SELECT j.id
    FROM job.jobs j
    WHERE j.id = ANY (ARRAY(SELECT d.job_id FROM job.dependencies d
                            WHERE d.depends_on = ANY (ARRAY(SELECT c.id FROM chosen c))))
      AND j.state = 'pending'
    ORDER BY j.id
    FOR NO KEY UPDATE
),
reopened AS (
    UPDATE job.dependencies d
    SET resolved  = false,
        flagged   = false,
        satisfied = NULL
    WHERE (d.job_id = ANY (ARRAY(SELECT c.id FROM chosen c)) AND d.resolved
           AND (
               -- its job did not satisfy it, whether or not that job still exists
               d.satisfied IS FALSE
               -- the edge is not satisfied now
               OR EXISTS (SELECT 1 FROM job.jobs x
                          WHERE x.id = d.depends_on
                            AND CASE d.mode WHEN 'completed' THEN x.state <> 'completed'
                                     ELSE x.state NOT IN ('completed', 'cancelled', 'discarded')
                                END)
               -- or the job it waits for is redriven by this statement (this snapshot still
               -- sees it ended, which satisfies an `after_all` edge)
               OR d.depends_on = ANY (ARRAY(SELECT c.id FROM chosen c))))
       -- an edge of a pending dependent, locked above, pointing at a job redriven here
       OR (d.depends_on = ANY (ARRAY(SELECT c.id FROM chosen c))
           AND d.job_id = ANY (ARRAY(SELECT w.id FROM waiting w)))
    RETURNING d.job_id
),
redriven AS (
    UPDATE job.jobs j
    SET state            = CASE WHEN j.id IN (SELECT o.job_id FROM reopened o)
                                THEN 'pending' ELSE 'available' END::job.job_state,
        attempt          = 0,
        snoozes          = 0,
        interruptions    = 0,
        run_at           = now(),
        deadline         = NULL,
        finalized_at     = NULL,
        cancel_requested = false,
        unique_scope     = CASE WHEN j.unique_scope = 'spent' THEN 'started'
                                ELSE j.unique_scope END
    FROM chosen c
    WHERE j.id = c.id AND j.state = 'discarded'
      AND (SELECT job.ordering_lock_keys(ARRAY(
               SELECT k.ordering_key FROM job.jobs k
               WHERE k.id = ANY (ARRAY(SELECT c2.id FROM chosen c2))))) IS NOT NULL
    RETURNING j.id, j.queue
),
woken AS (
    SELECT pg_notify('job_insert', q.queue)
    FROM (SELECT DISTINCT queue FROM redriven) q
)
SELECT r.id,
       (x.id IS NOT NULL) AS redriven,
       CASE WHEN x.id IS NOT NULL THEN NULL ELSE coalesce(r.holder, r.first) END AS existing,
       (SELECT count(*) FROM woken) AS queues_woken
FROM ranked r
LEFT JOIN redriven x ON x.id = r.id
ORDER BY r.id
