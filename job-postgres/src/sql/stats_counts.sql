-- Counts jobs per queue and state, filtered as stats_filter.sql says ($1..$5).
SELECT j.queue, j.state::text AS state, count(*) AS n
FROM job.jobs j
WHERE
-- @stats_filter
GROUP BY j.queue, j.state
ORDER BY j.queue, j.state
