-- The second of the pruner's two statements: deletes the jobs $1 that prune_pick.sql locked
-- in this transaction, but those a dependent still needs (the same condition as there),
-- recording on the edges still pointing at them whether they satisfied them (@verdicts). What
-- the jobs deleted depended on (job.dependencies, migration 0013) and their steps go by
-- job.jobs' delete trigger (migration 0057), by primary key. Returns how many jobs.
--
-- Why two statements: a dependent's enqueue holds the job it waits for FOR KEY SHARE until it
-- commits (migration 0019), which the lock of prune_pick.sql skips; but an enqueue that
-- committed after that statement's snapshot and before its lock was not seen: its edge was
-- not in the snapshot, and a row lock only (no new row version) gives the lock no newer row to
-- check the condition against again. One statement deleted the job, and the stager then
-- discarded the dependent: "was deleted", although what it waited for had completed. This
-- statement takes a snapshot of its own (READ COMMITTED, as every statement of the store),
-- after those locks: it sees every edge written by an enqueue that held a job before them,
-- and an enqueue after them waits for this transaction (and is refused if the job is gone).
-- The batch is an array, so the delete looks its rows up by primary key (planned as a join
-- with a subquery, it could hash a scan of the whole table).
WITH gone AS (
    DELETE FROM job.jobs j
    WHERE j.id = ANY ($1::bigint[])
      AND NOT EXISTS (SELECT 1 FROM job.dependencies d
                      WHERE d.depends_on = j.id
                        AND (NOT d.resolved
                             OR EXISTS (SELECT 1 FROM job.jobs w
                                        WHERE w.id = d.job_id
                                          AND w.state NOT IN ('completed', 'cancelled',
                                                              'discarded'))))
    RETURNING j.id, j.state
),
-- @verdicts
SELECT count(*) FROM gone
