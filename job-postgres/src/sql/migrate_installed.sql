-- Whether the migration table exists yet.
SELECT to_regclass('job.schema_migrations') IS NOT NULL
