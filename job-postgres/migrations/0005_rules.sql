-- 0005 rules: one set of rules for what a job row may hold, checked by the database at every
-- door (the Rust helpers, `job.enqueue`, a raw INSERT), and the one place where the payload
-- limit is configured. Append-only: change the schema in a new numbered file.
--
-- Two kinds of rules:
--
-- * Admission rules (names, payload, tags, tenant, unique key) are checked when a value is
--   written: by the trigger `jobs_admission`, on INSERT and on an UPDATE that sets one of
--   those columns. Rows stored before this migration that break them (a payload over a limit that an
--   older client allowed, a kind with a zero-width character, an array payload of a
--   hand-written `Job`) were written by code that was allowed to write them: they stay as they
--   are and run as before. A CHECK would not do here: PostgreSQL checks every CHECK on every
--   UPDATE of a row, so each claim and finalize of such a row would fail, and with it the
--   whole batch of the claim.
-- * Row invariants (timestamps PostgreSQL, Rust, Python and JavaScript can all represent)
--   must hold for every row, or reading the row fails: infinite and out-of-range times are
--   clamped below (the meaning is kept: `infinity` was "never", `-infinity` "long ago"), then
--   each column gets a CHECK, added NOT VALID here (the table is locked only for the clamp)
--   and validated by migration 0006 in a transaction of its own, which lets writes go on.

-- The payload limit, in bytes of the payload's JSON text as PostgreSQL prints it
-- (`octet_length(payload::text)`). One row. Change it with
-- `UPDATE job.settings SET payload_limit = 2097152;` (as the schema's owner): every door
-- obeys it from the next statement on (job.apply_settings, below). Jobs already stored are
-- not affected.
CREATE TABLE job.settings (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    payload_limit integer NOT NULL DEFAULT 1048576
                  CONSTRAINT settings_payload_limit_check CHECK (payload_limit BETWEEN 2 AND 268435455)
);

-- The characters no kind, queue, tag, tenant or pause name may contain, as a regular
-- expression: whitespace, control and format characters (Unicode White_Space, Cc, Cf, Zs, Zl
-- and Zp: tabs, newlines, no-break and zero-width spaces, bidirectional overrides, soft
-- hyphens, tag characters). The list is explicit, so it does not depend on the database's
-- locale; `job_core::new_job::FORBIDDEN_IN_NAMES` is the same list (a test compares the two
-- over every Unicode code point).
CREATE FUNCTION job.forbidden_in_names() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT '[\u0001-\u0020\u007f-\u00a0\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u206f\u3000\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]'::text $$;

-- What is wrong with a kind, queue, tag, tenant or pause name, or NULL when nothing is.
-- `job_core::new_job::name_problem` is the same rule with the same words: 1 to `max_bytes`
-- bytes, none of them in job.forbidden_in_names().
CREATE FUNCTION job.name_problem(name text, max_bytes integer DEFAULT 128) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN name IS NULL THEN 'must not be null'
        WHEN name = '' THEN 'must not be empty'
        WHEN octet_length(name) > max_bytes
            THEN format('must be at most %s bytes, got %s', max_bytes, octet_length(name))
        WHEN name ~ job.forbidden_in_names()
            THEN (
                SELECT format('must not contain whitespace, control or format characters '
                              '(U+%s at character %s)',
                              upper(lpad(h, greatest(4, length(h)), '0')), position(c IN name))
                FROM substring(name FROM job.forbidden_in_names()) AS c,
                     to_hex(ascii(c)) AS h
            )
    END
$$;

-- The first admission rule a job's values break, as (the column, what is wrong), or no row.
-- Used by the triggers below and by `job.enqueue` / `job.enqueue_many` (migration 0007), so
-- every door says the same thing. The Rust side checks the same rules before it sends a job
-- (`job_core::NewJob::validate`).
CREATE FUNCTION job.admission_problem(
    kind       text,
    queue      text,
    payload    jsonb,
    tags       text[],
    tenant     text,
    unique_key text,
    OUT "column" text,
    OUT problem  text
)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT p.col, p.problem
    FROM (
        SELECT 1 AS ord, 'kind' AS col, job.name_problem(kind) AS problem
        UNION ALL
        SELECT 2, 'queue', job.name_problem(queue)
        UNION ALL
        SELECT 3, 'payload', CASE
            WHEN payload IS NULL THEN 'must not be null'
            WHEN jsonb_typeof(payload) <> 'object'
                THEN format('must be a JSON object, got %s', CASE jsonb_typeof(payload)
                                WHEN 'array' THEN 'an array' WHEN 'string' THEN 'a string'
                                WHEN 'number' THEN 'a number' WHEN 'boolean' THEN 'a boolean'
                                ELSE jsonb_typeof(payload) END)
            ELSE (
                SELECT format('is %s bytes, over the limit of %s bytes', n, s.payload_limit)
                FROM job.settings s, octet_length(payload::text) AS n
                WHERE n > s.payload_limit
            )
        END
        UNION ALL
        SELECT 4, 'tags', CASE
            WHEN tags IS NULL THEN 'must not be null'
            WHEN array_ndims(tags) > 1 THEN 'must be a one-dimensional array'
            WHEN cardinality(tags) > 32
                THEN format('at most 32 tags, got %s', cardinality(tags))
            ELSE (
                SELECT format('tag %s %s', t.n, coalesce(job.name_problem(t.tag), ''))
                FROM unnest(tags) WITH ORDINALITY AS t(tag, n)
                WHERE job.name_problem(t.tag) IS NOT NULL
                ORDER BY t.n
                LIMIT 1
            )
        END
        UNION ALL
        SELECT 5, 'tenant', CASE WHEN tenant IS NOT NULL THEN job.name_problem(tenant) END
        UNION ALL
        SELECT 6, 'unique_key', CASE
            WHEN unique_key IS NOT NULL AND octet_length(unique_key) NOT BETWEEN 1 AND 512
                THEN format('must be 1 to 512 bytes, got %s', octet_length(unique_key))
        END
    ) p
    WHERE p.problem IS NOT NULL
    ORDER BY p.ord
    LIMIT 1
$$;

-- The admission rules as one boolean expression over the columns of a row (`r` is what comes
-- before each column's name: 'NEW.' in a trigger, '' in a function of the columns), with the
-- payload limit written in as a number: built-in operators and constants only, so that it
-- costs no query and no plan wherever it is evaluated. True only when job.admission_problem
-- would find nothing; when it is not true (a rule is broken, or the tags are many or long),
-- job.admission_problem decides.
CREATE FUNCTION job.admission_predicate(r text, payload_limit integer) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT format(
        $p$(octet_length(%1$skind) BETWEEN 1 AND 128 AND %1$skind !~ %2$L
    AND octet_length(%1$squeue) BETWEEN 1 AND 128 AND %1$squeue !~ %2$L
    AND jsonb_typeof(%1$spayload) = 'object'
    AND octet_length(%1$spayload::text) <= %3$s
    AND (%1$stenant IS NULL
         OR (octet_length(%1$stenant) BETWEEN 1 AND 128 AND %1$stenant !~ %2$L))
    AND (%1$sunique_key IS NULL OR octet_length(%1$sunique_key) BETWEEN 1 AND 512)
    AND (cardinality(%1$stags) = 0
         OR (array_ndims(%1$stags) = 1 AND cardinality(%1$stags) <= 32
             AND array_position(%1$stags, NULL) IS NULL AND NOT '' = ANY (%1$stags)
             AND octet_length(array_to_string(%1$stags, '')) <= 128
             AND array_to_string(%1$stags, '') !~ %2$L)))$p$,
        r, job.forbidden_in_names(), payload_limit)
$$;

-- Raises the refusal of a row that the trigger's quick test did not pass, naming the column,
-- unless job.admission_problem finds nothing wrong after all. SECURITY DEFINER, so that a
-- writer needs no privilege on the helper functions (0007 revokes them from PUBLIC); the
-- search_path is pinned, so that a writer cannot put operators of its own before pg_catalog's.
CREATE FUNCTION job.check_admission() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad record;
BEGIN
    SELECT * INTO bad
    FROM job.admission_problem(NEW.kind, NEW.queue, NEW.payload, NEW.tags, NEW.tenant,
                               NEW.unique_key);
    IF FOUND THEN
        RAISE EXCEPTION 'job row refused: `%` %', bad."column", bad.problem
            USING ERRCODE = 'check_violation', COLUMN = bad."column", TABLE = 'jobs',
                  SCHEMA = 'job', CONSTRAINT = 'jobs_admission';
    END IF;
    RETURN NEW;
END
$$;

-- Puts the payload limit of job.settings into effect, at every door, from the next statement
-- on: (re)defines job.quickly_admissible(kind, queue, payload, tags, tenant, unique_key), the
-- test job.enqueue and job.enqueue_many make before they look for a reason, and the trigger
-- `jobs_admission` on job.jobs: on INSERT, and on an UPDATE that sets one of the admitted
-- columns (the claim, heartbeat and finalize set none of them). Its WHEN clause is the
-- predicate itself, which PostgreSQL evaluates for each row without calling any function, so
-- an admissible row costs next to nothing; job.check_admission runs only for the others.
-- Recreating the trigger locks job.jobs against writes until the settings' transaction
-- commits.
CREATE FUNCTION job.apply_settings() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION job.quickly_admissible(kind text, queue text, payload jsonb, '
        'tags text[], tenant text, unique_key text) RETURNS boolean '
        'LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        'SELECT ' || job.admission_predicate('', NEW.payload_limit));
    EXECUTE 'DROP TRIGGER IF EXISTS jobs_admission ON job.jobs';
    EXECUTE format(
        'CREATE TRIGGER jobs_admission '
        'BEFORE INSERT OR UPDATE OF kind, queue, payload, tags, tenant, unique_key ON job.jobs '
        'FOR EACH ROW WHEN (%s IS NOT TRUE) EXECUTE FUNCTION job.check_admission()',
        job.admission_predicate('NEW.', NEW.payload_limit));
    RETURN NULL;
END
$$;

CREATE TRIGGER settings_apply
    AFTER INSERT OR UPDATE ON job.settings
    FOR EACH ROW
    EXECUTE FUNCTION job.apply_settings();

INSERT INTO job.settings DEFAULT VALUES;

-- Row invariants: every stored time is finite and within 0001-01-01 .. 9999-12-31 UTC, which
-- PostgreSQL, chrono, Python's datetime and JavaScript's Date all represent. Constraints
-- first (NOT VALID: no scan, and every row written from now on is checked), then the clamp
-- under the lock the constraints took, so no writer slips a bad row in between.
ALTER TABLE job.jobs
    ADD CONSTRAINT jobs_run_at_check
        CHECK (run_at >= '0001-01-01 00:00:00+00' AND run_at < '10000-01-01 00:00:00+00')
        NOT VALID,
    ADD CONSTRAINT jobs_deadline_check
        CHECK (deadline >= '0001-01-01 00:00:00+00' AND deadline < '10000-01-01 00:00:00+00')
        NOT VALID,
    ADD CONSTRAINT jobs_created_at_check
        CHECK (created_at >= '0001-01-01 00:00:00+00' AND created_at < '10000-01-01 00:00:00+00')
        NOT VALID,
    ADD CONSTRAINT jobs_finalized_at_check
        CHECK (finalized_at >= '0001-01-01 00:00:00+00'
               AND finalized_at < '10000-01-01 00:00:00+00')
        NOT VALID,
    ADD CONSTRAINT jobs_locked_until_check
        CHECK (locked_until >= '0001-01-01 00:00:00+00'
               AND locked_until < '10000-01-01 00:00:00+00')
        NOT VALID;

-- (least and greatest skip NULLs; a NULL stays NULL through the CASE.)
UPDATE job.jobs
SET run_at       = least(greatest(run_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59.999999+00'),
    deadline     = CASE WHEN deadline IS NOT NULL THEN least(greatest(deadline, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59.999999+00') END,
    created_at   = least(greatest(created_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59.999999+00'),
    finalized_at = CASE WHEN finalized_at IS NOT NULL
                        THEN least(greatest(finalized_at, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59.999999+00') END,
    locked_until = CASE WHEN locked_until IS NOT NULL
                        THEN least(greatest(locked_until, '0001-01-01 00:00:00+00'), '9999-12-31 23:59:59.999999+00') END
WHERE NOT (run_at >= '0001-01-01 00:00:00+00' AND run_at <= '9999-12-31 23:59:59.999999+00')
   OR NOT (deadline >= '0001-01-01 00:00:00+00' AND deadline <= '9999-12-31 23:59:59.999999+00')
   OR NOT (created_at >= '0001-01-01 00:00:00+00' AND created_at <= '9999-12-31 23:59:59.999999+00')
   OR NOT (finalized_at >= '0001-01-01 00:00:00+00' AND finalized_at <= '9999-12-31 23:59:59.999999+00')
   OR NOT (locked_until >= '0001-01-01 00:00:00+00' AND locked_until <= '9999-12-31 23:59:59.999999+00');
