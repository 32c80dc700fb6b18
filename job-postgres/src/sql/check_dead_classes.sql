-- Dead letters per class of their last recorded error (`(none)` without one), from
-- jobs_discarded_idx (discarded rows only).
SELECT coalesce(j.errors -> -1 ->> 'class', '(none)') AS class, count(*) AS n
FROM job.jobs j
WHERE j.state = 'discarded'
GROUP BY 1
ORDER BY 2 DESC, 1
