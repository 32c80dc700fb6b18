-- Reads the state of job $1.
SELECT state::text FROM job.jobs WHERE id = $1::bigint
