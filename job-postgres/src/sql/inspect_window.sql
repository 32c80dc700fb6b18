-- The scan window of one listing page: the $2 newest ids below $1 (null: from the newest), read
-- from the primary key alone. Returns the lowest of them and how many there are (fewer than $2:
-- the window reaches the oldest row). inspect_page.sql then looks at these ids only, so a page
-- never reads more than $2 rows whatever its filter matches.
SELECT min(w.id) AS low, count(*) AS n
FROM (
    SELECT j.id
    FROM job.jobs j
    WHERE ($1::bigint IS NULL OR j.id < $1::bigint)
    ORDER BY j.id DESC
    LIMIT $2::integer
) w
