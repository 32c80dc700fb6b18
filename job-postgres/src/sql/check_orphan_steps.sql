-- One pass over job.steps, per job: `orphans`, the recorded steps whose job row is gone
-- (job.jobs' delete and truncate triggers, migration 0057, should make it zero; a foreign
-- key's cascade did before), an anti-join on the jobs' primary key once per job; and
-- `totals_off`, the jobs whose row of job.step_totals (migration 0062, which a step's save
-- reads for the job's limits) disagrees with their steps, or exists without any: triggers keep
-- it, so it drifts only where they did not run (a data-only restore that loaded both tables
-- with the triggers on, `session_replication_role = replica`, a trigger disabled). Both
-- tables are read in one snapshot, and a save writes its step and the totals in one
-- transaction, so saves running meanwhile do not show.
WITH per_job AS (
    SELECT s.job_id, count(*) AS steps,
           sum(coalesce(s.output_bytes, octet_length(s.output::text))) AS bytes
    FROM job.steps s
    GROUP BY s.job_id
)
SELECT coalesce((SELECT sum(p.steps) FROM per_job p
                 WHERE NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.id = p.job_id)), 0)::bigint
           AS orphans,
       (SELECT count(*) FROM per_job p
        FULL JOIN job.step_totals t ON t.job_id = p.job_id
        WHERE p.job_id IS NULL OR t.job_id IS NULL
           OR t.steps <> p.steps OR t.bytes <> p.bytes) AS totals_off
