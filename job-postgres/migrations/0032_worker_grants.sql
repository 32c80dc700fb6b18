-- 0032 worker_grants: an upgraded installation grants its workers what a fresh one does.
-- Append-only: change the schema in a new numbered file.
--
-- Migrations 0009 (job.kind_owners, job.leaders, job.set_trace_context), 0012
-- (job.set_ordering_key, job.ordering_wake_up), 0013 (job.dependencies,
-- job.dependencies_exist, job.dependencies_resolve), 0014 (job.compensations) and 0015
-- (job.rate_windows, job.rate_cursors, job.set_rate_key, job.breaker_record) created objects
-- the worker's statements need, and granted them to nobody: only the README told a fresh
-- installation to. A worker role granted as the README said before one of them was refused
-- after the upgrade (stage.sql calls job.ordering_wake_up: scheduled and retrying jobs never
-- became available; the claim of a rate-limited kind writes job.rate_windows; every batch of
-- outcomes calls job.breaker_record).
--
-- So every role that holds the worker's privileges gets the README's worker grants as they
-- are at this migration. The roles are read as 0020 reads a function's grants (aclexplode of
-- the ACL): those granted UPDATE on job.jobs, other than the table's owner, PUBLIC (a grant
-- to PUBLIC of the SECURITY DEFINER functions below would be everyone's, which nobody asked
-- for) and superusers (who need no grant). Granting what a role holds already changes
-- nothing. A role that is a worker by membership in such a role inherits the grants.
--
-- And the README told an operator to take INSERT and DELETE on job.pauses, but a pause is an
-- INSERT ... ON CONFLICT DO UPDATE (sql/pause.sql), which needs UPDATE too: every role
-- holding INSERT and DELETE on job.pauses (same exclusions) gets UPDATE on it.
--
-- A later migration that adds an object a worker or an operator needs grants it the same way
-- (README, "Roles and privileges").

DO $grants$
DECLARE
    worker text;
    operator text;
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
        EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA job TO %s', worker);
        EXECUTE pg_catalog.format(
            'GRANT SELECT, INSERT, UPDATE, DELETE ON job.jobs, job.steps, job.dependencies TO %s',
            worker);
        EXECUTE pg_catalog.format('GRANT SELECT ON job.pauses TO %s', worker);
        EXECUTE pg_catalog.format(
            'GRANT SELECT, INSERT, UPDATE, DELETE ON job.kind_owners, job.leaders, '
            'job.compensations, job.rate_windows, job.rate_cursors TO %s',
            worker);
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION job.enqueue_unique, job.set_trace_context, '
            'job.set_ordering_key, job.set_rate_key, job.ordering_wake_up, '
            'job.dependencies_exist, job.dependencies_resolve, job.breaker_record TO %s',
            worker);
    END LOOP;

    FOR operator IN
        SELECT a.grantee::pg_catalog.regrole::text
        FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a, pg_catalog.pg_roles r
        WHERE c.oid = 'job.pauses'::pg_catalog.regclass
          AND a.grantee <> c.relowner
          AND r.oid = a.grantee
          AND NOT r.rolsuper
        GROUP BY a.grantee
        HAVING pg_catalog.bool_or(a.privilege_type = 'INSERT')
           AND pg_catalog.bool_or(a.privilege_type = 'DELETE')
    LOOP
        EXECUTE pg_catalog.format('GRANT UPDATE ON job.pauses TO %s', operator);
    END LOOP;
END
$grants$;
