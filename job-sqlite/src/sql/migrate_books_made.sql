-- Whether the books of applied migrations exist (a new file has none).
SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'job_schema_migrations')
