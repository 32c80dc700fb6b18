-- Serializes migrators until the end of the transaction.
SELECT pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0))
