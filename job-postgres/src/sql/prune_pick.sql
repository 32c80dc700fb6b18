-- The first of the pruner's two statements (admin.rs runs both in one transaction, prune.sql
-- second): locks up to $3 completed jobs finished more than $1 milliseconds ago and cancelled
-- jobs finished (and due) more than $2 milliseconds ago (never discarded ones), oldest first,
-- skipping rows someone holds, and returns their ids for prune.sql to delete. A job that a
-- dependent still needs is passed over (the condition prune.sql checks again, with a snapshot
-- taken after these locks): one that an unresolved edge points at (the stager has not told its
-- dependent yet; deleted, it would read as a dependency that did not complete, and the
-- dependent would be discarded), and, since migration 0031, one that any edge points at whose
-- dependent has not finished (a batch's member whose edge the stager resolved as it ended,
-- while the callback still waits for its other members: the callback reads its members' state,
-- errors and result when it runs).
--
-- Each state is read through its own index up to its own cutoff (jobs_completed_idx, migration
-- 0017; jobs_cancelled_prune_idx, migration 0029), oldest first and at most $3, and the $3
-- oldest of both are returned: a pass reads what it may delete, never a dead letter nor a job
-- within its retention. (One condition over both states gave no index condition and walked
-- every finished row.) A branch may lock rows that are then not among the $3: at most $3 of
-- them, until the pruner's transaction ends. The edges pointing at a job are found through
-- dependencies_depends_on_idx (migration 0031), each dependent by its primary key.
SELECT f.id
FROM (SELECT c.id, c.finalized_at
      FROM (SELECT j.id, j.finalized_at
            FROM job.jobs j
            WHERE j.state = 'completed'
              AND j.finalized_at < now() - $1::bigint * interval '1 millisecond'
              AND NOT EXISTS (SELECT 1 FROM job.dependencies d
                              WHERE d.depends_on = j.id
                                AND (NOT d.resolved
                                     OR EXISTS (SELECT 1 FROM job.jobs w
                                                WHERE w.id = d.job_id
                                                  AND w.state NOT IN ('completed', 'cancelled',
                                                                      'discarded'))))
            ORDER BY j.finalized_at
            LIMIT $3::integer
            FOR UPDATE SKIP LOCKED) c
      UNION ALL
      SELECT c.id, c.finalized_at
      FROM (SELECT j.id, greatest(j.finalized_at, j.run_at) AS finalized_at
            FROM job.jobs j
            WHERE j.state = 'cancelled'
              -- A job cancelled before its time (a periodic job's next period) is kept until
              -- that time has passed by the retention too: its unique key (`UntilPruned`) is
              -- what keeps a scheduler from enqueueing the period again. Read in that order
              -- (jobs_cancelled_prune_idx, migration 0029), so that such rows are not walked
              -- by every pass.
              AND greatest(j.finalized_at, j.run_at)
                  < now() - $2::bigint * interval '1 millisecond'
              AND NOT EXISTS (SELECT 1 FROM job.dependencies d
                              WHERE d.depends_on = j.id
                                AND (NOT d.resolved
                                     OR EXISTS (SELECT 1 FROM job.jobs w
                                                WHERE w.id = d.job_id
                                                  AND w.state NOT IN ('completed', 'cancelled',
                                                                      'discarded'))))
            ORDER BY greatest(j.finalized_at, j.run_at)
            LIMIT $3::integer
            FOR UPDATE SKIP LOCKED) c) f
ORDER BY f.finalized_at
LIMIT $3::integer
