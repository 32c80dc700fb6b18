-- The ids of the jobs job $1 depends on (or, for a batch's callback, its members), in id order.
SELECT d.depends_on FROM job.dependencies d WHERE d.job_id = $1::bigint ORDER BY d.depends_on
