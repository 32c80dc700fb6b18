-- 0063 paths_pinned: the last two PL/pgSQL functions that ran with their caller's search_path
-- pin it, and job.shown, which echoes values in errors, hides the invisible characters that
-- reorder or hide text as it hides control characters. Append-only: change the schema in a new
-- numbered file.
--
-- job.notify_insert (migration 0001, the statement trigger of every INSERT into job.jobs) and
-- job.enqueue_unique (migration 0020, the worker's keyed enqueue, last replaced by 0059) run
-- with their caller's rights and, until now, their caller's search_path. Both compare
-- job.job_state values, and PostgreSQL takes an operator of the exact types, wherever on the
-- path it is, over pg_catalog's operator of any enum: a role able to create objects in a
-- schema on another role's path (`public` in a database created before PostgreSQL 15, whose
-- PUBLIC may create there; an application's own schema) could define `=` on
-- (job.job_state, job.job_state) and have it run as whoever inserted a job. A probe did so as
-- an enqueue-only role and read every payload as the worker; as the owner it would have run
-- as the owner. The same operator broke every keyed enqueue (ON CONFLICT found no index whose
-- predicate matched). Pinned to pg_catalog, pg_temp, as every SECURITY DEFINER function of the
-- schema and job.claim already are: both bodies name the schema's objects in full. The
-- functions left unpinned are the SQL helpers of the naming rules (migrations 0005 and 0022),
-- which the planner inlines only without a SET clause and which compare built-in types only,
-- whose exact operators pg_catalog, searched first, always has (tests/doors/roles.rs holds them
-- to that).
--
-- job.shown (migration 0042) shows at most 40 characters of a refused value with control
-- characters as `?`. Format characters passed: a right-to-left override (U+202E), a line
-- separator (U+2028), a zero-width space, a soft hyphen, which in an operator's terminal or log
-- viewer reorder, break or hide the text around them (a producer's unique key could make a
-- logged refusal read as another). They are now `?` too: the characters job.forbidden_in_names
-- refuses in names, but the spaces, which show as spaces.

ALTER FUNCTION job.notify_insert() SET search_path = pg_catalog, pg_temp;

ALTER FUNCTION job.enqueue_unique(text, text, smallint, jsonb, integer, integer, timestamptz,
                                  timestamptz, text, text, boolean, text[], text)
    SET search_path = pg_catalog, pg_temp;

-- As in migration 0042, with the wider class. CREATE OR REPLACE keeps its owner and grants.
CREATE OR REPLACE FUNCTION job.shown(value text) RETURNS text
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT regexp_replace(left(value, 40),
                          '[[:cntrl:]\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd'
                          '\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e'
                          '\u2060-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd'
                          '\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a'
                          '\U000e0001\U000e0020-\U000e007f]',
                          '?', 'g')
           || CASE WHEN length(value) > 40
                   THEN format('… (%s bytes)', octet_length(value)) ELSE '' END
$$;
