-- 0036 compensation_passing_errors: a compensating job that the server could not insert for a
-- passing reason is not given up. Append-only: change the schema in a new numbered file.
--
-- job.compensate (the AFTER trigger that enqueues a discarded job's compensating job) caught
-- every error of its INSERT and turned it into a WARNING, so that a compensating job the
-- rules refuse (a payload over the limit after all, an application's trigger) never fails the
-- discard. It caught the server's passing conditions too: a deadlock, a lock not available, a
-- shortage (out of memory, disk full), an operator's intervention, a connection's end. The
-- discard then committed without its compensation, a WARNING in the server log the only
-- trace. Those now fail the discard's statement, as they would any statement: the worker
-- writes the outcome again (it passes), and the compensation is enqueued with it. Only what
-- says something about the row itself is still caught. The classes are those the store
-- retries (job-postgres/src/error.rs, PASSING_CLASSES) that speak of the server rather than
-- of the deploy: 08, 40, 53, 55, 57, 58, XX. (57014, a cancelled statement, was never caught:
-- PL/pgSQL's OTHERS leaves it out.)
CREATE OR REPLACE FUNCTION job.compensate() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    fits boolean;
    wrapped jsonb;
    trace text;
BEGIN
    SELECT * INTO c FROM job.compensations WHERE kind = NEW.kind;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The whole wrapping is measured, as the admission rule measures a payload: the discarded
    -- payload goes in when it fits with the id, kind and last error, else it is omitted.
    wrapped := jsonb_build_object('discarded', jsonb_build_object(
        'job_id', NEW.id,
        'kind', NEW.kind,
        'payload', NEW.payload,
        'payload_omitted', false,
        'error', NEW.errors -> -1));
    SELECT octet_length(wrapped::text) <= s.payload_limit INTO fits FROM job.settings s;
    IF NOT coalesce(fits, false) THEN
        wrapped := jsonb_build_object('discarded', jsonb_build_object(
            'job_id', NEW.id,
            'kind', NEW.kind,
            'payload', NULL,
            'payload_omitted', true,
            'error', NEW.errors -> -1));
    END IF;
    IF NEW.trace_context ~ '^00-[0123456789abcdef]{32}-[0123456789abcdef]{16}-[0123456789abcdef]{2}$'
       AND substr(NEW.trace_context, 4, 32) <> '00000000000000000000000000000000'
       AND substr(NEW.trace_context, 37, 16) <> '0000000000000000' THEN
        trace := NEW.trace_context;
    END IF;
    BEGIN
        INSERT INTO job.jobs (kind, queue, payload, tenant, trace_context)
        VALUES (c.compensate_kind, c.compensate_queue, wrapped, NEW.tenant, trace);
    EXCEPTION WHEN OTHERS THEN
        IF left(SQLSTATE, 2) IN ('08', '40', '53', '55', '57', '58', 'XX') THEN
            RAISE;
        END IF;
        RAISE WARNING 'job %: compensating job % not enqueued: %', NEW.id, c.compensate_kind,
            SQLERRM;
    END;
    RETURN NULL;
END
$$;
