-- 0038 worker_reads_migrations: a worker's `migrate()` runs on an up-to-date schema. Append-only:
-- change the schema in a new numbered file.
--
-- The README has every process call `PgStore::migrate()` at startup, and a second run only
-- reads `job.schema_migrations` (under the migrator's advisory lock, which any role takes),
-- but no grant let a worker read it: a worker granted as the README said failed to start,
-- "permission denied for table schema_migrations", with nothing to migrate. The worker's
-- grants now include reading it (a worker still cannot apply a migration: that is the
-- owner's). Granted here, as migration 0032 grants the worker's block, to every role that holds
-- the worker's privileges (UPDATE on job.jobs; not the owner, PUBLIC or superusers).

DO $grants$
DECLARE
    worker text;
BEGIN
    FOR worker IN
        SELECT DISTINCT a.grantee::pg_catalog.regrole::text
        FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a, pg_catalog.pg_roles r
        WHERE c.oid = 'job.jobs'::pg_catalog.regclass
          AND a.privilege_type = 'UPDATE'
          AND a.grantee <> c.relowner
          AND r.oid = a.grantee
          AND NOT r.rolsuper
    LOOP
        EXECUTE pg_catalog.format('GRANT SELECT ON job.schema_migrations TO %s', worker);
    END LOOP;
END
$grants$;
