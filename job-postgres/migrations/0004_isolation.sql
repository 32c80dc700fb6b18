-- 0004 isolation: what a worker needs to keep its promises whatever its handlers do.
--
-- `stuck_since`: set by the heartbeat while a running execution's code has outlived its timeout
-- (or being told to stop) by the worker's `stuck_after`; the execution keeps its lease. Every
-- statement that clears a lease clears it too, and the CHECK makes that a rule.
--
-- `job.push_error(history, entry)`: appends one entry to an error history and keeps it bounded:
-- the first entry and the latest 19 (20 in all; MAX_ERROR_HISTORY in job-core). finalize.sql,
-- rescue_expired.sql and release.sql append through it, so no job's history grows without
-- bound (a job retried forever with 10 MiB messages once made a 262 MB row). A history longer
-- than that (written before this migration) is cut the first time an entry is appended.
-- Append-only: change the schema in a new numbered file.

ALTER TABLE job.jobs ADD COLUMN stuck_since timestamptz;

ALTER TABLE job.jobs ADD CONSTRAINT jobs_stuck_check
    CHECK (stuck_since IS NULL OR lock_token IS NOT NULL) NOT VALID;
ALTER TABLE job.jobs VALIDATE CONSTRAINT jobs_stuck_check;

CREATE FUNCTION job.push_error(history jsonb, entry jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog
AS $$
    SELECT CASE
        WHEN jsonb_array_length(history) < 20 THEN history || jsonb_build_array(entry)
        ELSE jsonb_build_array(history -> 0)
             || coalesce((SELECT jsonb_agg(e.value ORDER BY e.ordinality)
                          FROM jsonb_array_elements(history) WITH ORDINALITY AS e
                          WHERE e.ordinality > jsonb_array_length(history) - 18),
                         '[]'::jsonb)
             || jsonb_build_array(entry)
    END
$$;

COMMENT ON FUNCTION job.push_error(jsonb, jsonb) IS
    'Appends entry to an error history, keeping the first entry and the latest 19.';
