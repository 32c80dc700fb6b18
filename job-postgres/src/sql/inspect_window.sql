-- The scan window of one listing page: the $2 newest ids below $1 (null: from the newest), read
-- from the primary key alone. Returns the lowest of them and how many there are (fewer than $2:
-- the window reaches the oldest row). inspect_page.sql then looks at these ids only, so a page
-- never reads more than $2 rows whatever its filter matches. `read_at`: the clock when the page
-- was read (clock_timestamp(), not the transaction's start: a job whose finalize committed
-- before this read has an earlier finalized_at).
SELECT min(w.id) AS low, count(*) AS n, clock_timestamp() AS read_at
FROM (
    SELECT j.id
    FROM job.jobs j
    WHERE ($1::bigint IS NULL OR j.id < $1::bigint)
    ORDER BY j.id DESC
    LIMIT $2::integer
) w
