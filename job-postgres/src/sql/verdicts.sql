-- Spliced into prune.sql and purge.sql after their `gone` (the jobs deleted: id, state) and
-- `edges` CTEs. A dependent's edge closed without a verdict (satisfied null: the dependent was
-- discarded for another of its dependencies while this job still ran, migration 0031) keeps
-- what this job's end meant for it before the job is gone: satisfied when it completed (or,
-- for an `after_all` edge, finished at all), else not. Without it, a redrive of the dependent
-- read the missing job of a null edge as satisfied, and the dependent ran although what it
-- needed had been cancelled or discarded. Edges of dependents deleted in the same statement
-- are left to `edges`.
verdicts AS (
    UPDATE job.dependencies d
    SET satisfied = CASE d.mode WHEN 'completed' THEN g.state = 'completed' ELSE true END
    FROM gone g
    WHERE d.depends_on = g.id AND d.resolved AND d.satisfied IS NULL
      AND d.job_id NOT IN (SELECT id FROM gone)
)
