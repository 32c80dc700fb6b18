-- The migrations recorded as applied, with the names they were recorded under.
SELECT version, name FROM job.schema_migrations ORDER BY version
