-- The versions already applied.
SELECT version FROM job.schema_migrations ORDER BY version
