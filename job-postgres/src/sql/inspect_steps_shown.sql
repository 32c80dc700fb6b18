-- The first $4 recorded steps of job $1, in the order they were recorded, unless the job
-- belongs to another tenant than $2 (null: any), each output only when its JSON text is at most
-- $3 bytes (its size always): what a page can show, bounded in rows and bytes whatever the job
-- recorded. The steps are taken first and only their sizes read: the size stored with the step
-- (migration 0049), else, for a step written before it, the length of its output as text,
-- which decompresses and prints the whole output (2 MiB at most), so it is done for the steps
-- shown only. An output shown comes also as its text, numbers as stored.
SELECT s.name,
       CASE WHEN b.bytes <= $3::integer THEN s.output END AS output,
       CASE WHEN b.bytes <= $3::integer THEN s.output::text END AS output_text,
       b.bytes AS output_bytes,
       s.attempt, s.recorded_at
FROM (SELECT s.name, s.output, s.output_bytes, s.attempt, s.recorded_at
      FROM job.steps s
      JOIN job.jobs j ON j.id = s.job_id
      WHERE s.job_id = $1::bigint AND ($2::text IS NULL OR j.tenant = $2::text)
      ORDER BY s.recorded_at, s.name
      LIMIT $4::integer) s
CROSS JOIN LATERAL (SELECT coalesce(s.output_bytes::bigint,
                                    octet_length(s.output::text)::bigint) AS bytes) b
ORDER BY s.recorded_at, s.name
