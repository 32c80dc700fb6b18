-- Creates the schema and the table recording applied migrations (simple protocol: two statements).
CREATE SCHEMA IF NOT EXISTS job;
CREATE TABLE IF NOT EXISTS job.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
