-- 0056 key_arguments: job.set_ordering_key and job.set_rate_key name the key they refuse.
-- Append-only: change the schema in a new numbered file.
--
-- Both give a job inserted by job.enqueue_unique its key (the Rust producer's
-- enqueue_unique.sql, and job.enqueue), granted to the worker and producer roles. Called by
-- hand with a key of 0 or over 512 bytes, each was refused by the table's check
-- (jobs_ordering_key_check, jobs_rate_key_check), whose error detail holds the whole row: a
-- megabyte-long key came back in the error, whole, beside the job's payload. They now refuse it
-- first with 22023 naming the argument, in job.enqueue's words ("must be 1 to 512 bytes, got
-- N"). A NULL key still clears the job's key, and a job that does not exist is still answered
-- NULL, as before. Plain PL/pgSQL, not SQL, for the check; an UPDATE inside a volatile
-- PL/pgSQL function sees the row job.enqueue_unique inserted earlier in the same statement, as
-- the SQL function's did. Their search_path gains pg_temp at its end (it was pg_catalog
-- alone, where pg_temp is searched first). CREATE OR REPLACE keeps each function's owner and
-- grants.

CREATE OR REPLACE FUNCTION job.set_ordering_key(job_id bigint, key text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF octet_length(key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'invalid set_ordering_key argument `key`: must be 1 to 512 bytes, got %',
                octet_length(key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE job.jobs SET ordering_key = key WHERE id = job_id;
    RETURN CASE WHEN FOUND THEN true END;
END
$$;

CREATE OR REPLACE FUNCTION job.set_rate_key(job_id bigint, key text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF octet_length(key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'invalid set_rate_key argument `key`: must be 1 to 512 bytes, got %',
                octet_length(key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE job.jobs SET rate_key = key WHERE id = job_id;
    RETURN CASE WHEN FOUND THEN true END;
END
$$;
