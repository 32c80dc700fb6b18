-- Records migration ?1 (named ?2) as applied, in the transaction that applied it.
INSERT INTO job_schema_migrations (version, name) VALUES (?1, ?2)
