-- Deletes up to $9 dead letters (discarded jobs) matching the filter of list.sql (with its
-- tenant scope $10), skipping
-- rows someone holds. Returns the ids deleted.
DELETE FROM job.jobs
WHERE id IN (
    SELECT j.id
    FROM job.jobs j
    WHERE j.state = 'discarded'
      AND (cardinality($1::bigint[]) = 0 OR j.id = ANY ($1::bigint[]))
  AND (cardinality($2::text[]) = 0 OR j.state::text = ANY ($2::text[]))
  AND ($3::text IS NULL OR j.kind = $3::text)
  AND ($4::text IS NULL OR j.queue = $4::text)
  AND ($5::text IS NULL OR j.tenant = $5::text)
  AND ($6::text IS NULL OR $6::text = ANY (j.tags))
  AND ($7::timestamptz IS NULL OR j.finalized_at >= $7::timestamptz)
  AND ($8::timestamptz IS NULL OR j.finalized_at < $8::timestamptz)
  AND ($10::text IS NULL OR j.tenant = $10::text)
    ORDER BY j.id
    LIMIT $9::integer
    FOR UPDATE SKIP LOCKED
)
RETURNING id
