-- The highest job id now: the rows a later statement inserts have higher ones.
SELECT coalesce(max(id), 0) FROM job_jobs
