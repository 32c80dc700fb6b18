-- How long, in milliseconds, the oldest due waiting job has been due, filtered as
-- stats_counts.sql; null when none is due. The available jobs and the scheduled and retryable
-- ones are read apart, each through its partial index (jobs_claim_idx; jobs_staging_idx, from
-- the soonest due): one test over the three states, which no index holds, read the whole table,
-- finished jobs included, on every `job stats` (a plan audit: 87-91 ms over 378,000 rows, 1.2
-- ms this way).
SELECT (extract(epoch FROM now() - least(
           (SELECT min(j.run_at)
            FROM job.jobs j
            WHERE j.state = 'available' AND j.run_at <= now()
              AND
-- @stats_filter
           ),
           (SELECT min(j.run_at)
            FROM job.jobs j
            WHERE j.state IN ('scheduled', 'retryable') AND j.run_at <= now()
              AND
-- @stats_filter
           ))) * 1000)::bigint
