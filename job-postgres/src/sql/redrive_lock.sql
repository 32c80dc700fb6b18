-- The first statement of a redrive's transaction: job.jobs, in the mode its writes take anyway,
-- before redrive.sql, which locks job.dependencies (its `reopened` UPDATE) before it writes
-- job.jobs. Every other writer takes job.jobs first; a migration that locks both (0037) waited
-- for a redrive holding job.dependencies while the redrive waited for it on job.jobs.
LOCK TABLE job.jobs IN ROW EXCLUSIVE MODE
