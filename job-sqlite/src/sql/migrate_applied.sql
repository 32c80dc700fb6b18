-- Whether migration ?1 is recorded as applied.
SELECT version FROM job_schema_migrations WHERE version = ?1
