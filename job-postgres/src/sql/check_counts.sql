-- Every job per state, exactly: one pass over the table. Run by `check` (an operator's explicit
-- reconcile), never by a dashboard page.
SELECT j.state::text AS state, count(*) AS n
FROM job.jobs j
GROUP BY j.state
ORDER BY j.state
