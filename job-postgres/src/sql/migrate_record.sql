-- Records one applied migration.
INSERT INTO job.schema_migrations (version, name) VALUES ($1::integer, $2::text)
