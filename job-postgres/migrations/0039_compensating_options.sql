-- 0039 compensating_options: a compensating job is enqueued with its own kind's options.
-- Append-only: change the schema in a new numbered file.
--
-- job.compensate inserted only the compensating job's kind, queue, payload, tenant and trace,
-- so the table's defaults applied: 25 attempts, priority 0, payload version 1, whatever the
-- compensating kind said. A compensating kind at `VERSION = 2` had every compensation
-- discarded as poison ("payload version 1 ... has no upgrade to version 2"). Workers now
-- record, beside the kind and queue, the compensating kind's priority, max_attempts and
-- payload version (`Compensate::of`), and the trigger enqueues with them. The columns are
-- nullable: a row recorded by an older worker (whose statement names only the first three
-- columns, and still succeeds) keeps the old defaults until a newer worker records it again.
--
-- And the wrapping has a third form, as SQLite's trigger has had since its migration 5: when
-- the discarded payload's omission is not enough (a last error of 5,000 bytes under a limit of
-- 4,096), the last error is omitted too (`"error": null, "error_omitted": true`). The insert
-- was refused, and the compensation given up with a WARNING. Only a limit too small for the
-- id, kind and flags alone still refuses it (a WARNING, as before).
ALTER TABLE job.compensations
    ADD COLUMN compensate_priority smallint
        CONSTRAINT compensations_priority_check CHECK (compensate_priority >= 0),
    ADD COLUMN compensate_max_attempts integer
        CONSTRAINT compensations_max_attempts_check CHECK (compensate_max_attempts >= 1),
    ADD COLUMN compensate_version integer
        CONSTRAINT compensations_version_check CHECK (compensate_version >= 1);

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
    -- When even that does not fit, the last error is omitted too.
    wrapped := jsonb_build_object('discarded', jsonb_build_object(
        'job_id', NEW.id,
        'kind', NEW.kind,
        'payload', NEW.payload,
        'payload_omitted', false,
        'error', NEW.errors -> -1,
        'error_omitted', false));
    SELECT octet_length(wrapped::text) <= s.payload_limit INTO fits FROM job.settings s;
    IF NOT coalesce(fits, false) THEN
        wrapped := jsonb_build_object('discarded', jsonb_build_object(
            'job_id', NEW.id,
            'kind', NEW.kind,
            'payload', NULL,
            'payload_omitted', true,
            'error', NEW.errors -> -1,
            'error_omitted', false));
        SELECT octet_length(wrapped::text) <= s.payload_limit INTO fits FROM job.settings s;
    END IF;
    IF NOT coalesce(fits, false) THEN
        wrapped := jsonb_build_object('discarded', jsonb_build_object(
            'job_id', NEW.id,
            'kind', NEW.kind,
            'payload', NULL,
            'payload_omitted', true,
            'error', NULL,
            'error_omitted', (NEW.errors -> -1) IS NOT NULL));
    END IF;
    IF NEW.trace_context ~ '^00-[0123456789abcdef]{32}-[0123456789abcdef]{16}-[0123456789abcdef]{2}$'
       AND substr(NEW.trace_context, 4, 32) <> '00000000000000000000000000000000'
       AND substr(NEW.trace_context, 37, 16) <> '0000000000000000' THEN
        trace := NEW.trace_context;
    END IF;
    BEGIN
        INSERT INTO job.jobs (kind, queue, priority, max_attempts, payload_version, payload,
                              tenant, trace_context)
        VALUES (c.compensate_kind, c.compensate_queue, coalesce(c.compensate_priority, 0),
                coalesce(c.compensate_max_attempts, 25), coalesce(c.compensate_version, 1),
                wrapped, NEW.tenant, trace);
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
