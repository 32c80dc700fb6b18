-- A fragment, not a statement: the filter of the stats statements over `job.jobs j`, spliced
-- (sql.rs) at the `@stats_filter` marker line of stats_counts.sql, stats_oldest.sql and
-- stats_stuck.sql:
-- $1 kind, $2 queue, $3 tenant, $4 a tag (null: any), within the tenant scope $5 (null: every
-- tenant).
($1::text IS NULL OR j.kind = $1::text)
  AND ($2::text IS NULL OR j.queue = $2::text)
  AND ($3::text IS NULL OR j.tenant = $3::text)
  AND ($4::text IS NULL OR $4::text = ANY (j.tags))
  AND ($5::text IS NULL OR j.tenant = $5::text)
