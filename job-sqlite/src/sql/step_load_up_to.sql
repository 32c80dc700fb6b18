-- The recorded step outputs of job ?1, in name order, while their names and output text add up
-- to at most ?2 bytes, each with how many steps the job has in all (a caller that got fewer
-- reads the others by name: step_load_one.sql). The sizes are read first, without carrying
-- the outputs, and only the outputs within the bound are read; the first step comes back
-- without its output when it alone is past the bound, so that the count always comes. A read,
-- so not guarded: the guard is on the write (step_save.sql).
SELECT w.name, CASE WHEN w.upto <= ?2 THEN s.output END AS output, w.total
FROM (
    SELECT name,
           sum(length(CAST(name AS BLOB)) + length(CAST(output AS BLOB)))
               OVER (ORDER BY name) AS upto,
           count(*) OVER () AS total,
           row_number() OVER (ORDER BY name) AS n
    FROM job_steps
    WHERE job_id = ?1
) w
JOIN job_steps s ON s.job_id = ?1 AND s.name = w.name
WHERE w.upto <= ?2 OR w.n = 1
ORDER BY w.name
