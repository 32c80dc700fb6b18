-- 0053 enqueue_problem_for_workers: a worker role's refused unique enqueue names its argument.
-- Append-only: change the schema in a new numbered file.
--
-- Migration 0052 made job.enqueue_unique (the Rust producer's function, run with its caller's
-- privileges) ask job.enqueue_problem why its arguments fail its quick test. EXECUTE on
-- job.enqueue_problem, and on the job.admission_problem and job.time_problem it calls, is
-- revoked from PUBLIC (migration 0007) and granted to no worker role (0032), so a worker
-- role's keyed enqueue that broke a rule (a priority of -1, a key of 600 bytes, sent past
-- the Rust checks through job_postgres::enqueue) failed with 42501 "permission denied for
-- function enqueue_problem" instead of the named refusal (before 0052: 23514 from the table).
--
-- job.enqueue_problem now runs as the schema's owner (its calls of the other two with it)
-- and PUBLIC may execute it: it gives nothing, reading only its arguments and the payload
-- limit of job.settings, which every enqueue's refusal already says. Its search_path is
-- pinned, as every SECURITY DEFINER function of the schema's is.

ALTER FUNCTION job.enqueue_problem(text, jsonb, text, integer, integer, timestamptz, integer,
                                   text, text, text, text[], text, timestamptz)
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp;

GRANT EXECUTE ON FUNCTION job.enqueue_problem(text, jsonb, text, integer, integer,
                                              timestamptz, integer, text, text, text, text[],
                                              text, timestamptz) TO PUBLIC;
