-- Every recorded step of job $1, in the order they were recorded, unless the job belongs to
-- another tenant than $2 (null: any). A read for operators; the primary key (job_id, name)
-- bounds it to the job's own rows. The output also as its text, numbers as stored.
SELECT s.name, s.output, s.output::text AS output_text, s.attempt, s.recorded_at
FROM job.steps s
JOIN job.jobs j ON j.id = s.job_id
WHERE s.job_id = $1::bigint AND ($2::text IS NULL OR j.tenant = $2::text)
ORDER BY s.recorded_at, s.name
