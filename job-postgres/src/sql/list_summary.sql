-- Lists what a listing shows of the jobs matching a filter (job_filter.sql: $1..$8, $10),
-- oldest (lowest id) first, at most $9: the summary of job_summary.sql ($11, $12), not the
-- row. What `job list` prints and `job purge` asks about: read whole, 1,000 dead letters of
-- 1 MiB payloads took gigabytes of the operator's memory.
-- @job_summary
WHERE
-- @job_filter
ORDER BY j.id
LIMIT $9::integer
