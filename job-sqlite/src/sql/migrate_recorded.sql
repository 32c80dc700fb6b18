-- The migrations recorded as applied, with the names they were recorded under (once the books
-- exist: migrate_books_made.sql). Read without a write transaction: opening a file whose
-- schema is up to date never waits for the file's write lock.
SELECT version, name FROM job_schema_migrations ORDER BY version
