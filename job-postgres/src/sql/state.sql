-- Reads the state of job $1, unless it belongs to another tenant than $2 (null: any).
SELECT state::text FROM job.jobs WHERE id = $1::bigint AND ($2::text IS NULL OR tenant = $2::text)
