-- 0014 compensation: a kind may name a compensating job, enqueued in the same transaction
-- that discards a job of that kind, so that undoing a partial effect is as durable as the
-- effect. Append-only: change the schema in a new numbered file.
--
-- job.compensations maps a kind to its compensating job's kind and queue. Workers write it
-- for the kinds they run before they claim (`#[job(compensate = RefundCharge)]`, through
-- `Store::register_kinds`), and remove the entry of a kind they run without one. The trigger
-- jobs_compensate fires only when a row becomes `discarded` (its WHEN clause is evaluated
-- without a function call, so other updates pay nothing), by any path: a finalize, the
-- rescuer, the expirer, the dependency resolver, an operator. It inserts the compensating job
-- with a payload `{"discarded": {"job_id", "kind", "payload", "error"}}` (`error`: the last
-- entry of the history, or null), the discarded job's tenant and trace. A discarded payload
-- too large to fit the payload limit with its wrapping is replaced by null (with
-- "payload_omitted": true), and an insert the database still refuses is given up with a
-- WARNING in the server log rather than failing the discard: a compensation must never stop
-- a worker from recording an outcome.

CREATE TABLE job.compensations (
    kind             text PRIMARY KEY CHECK (octet_length(kind) BETWEEN 1 AND 128),
    compensate_kind  text NOT NULL CHECK (octet_length(compensate_kind) BETWEEN 1 AND 128),
    compensate_queue text NOT NULL CHECK (octet_length(compensate_queue) BETWEEN 1 AND 128),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION job.compensate() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c record;
    fits boolean;
BEGIN
    SELECT * INTO c FROM job.compensations WHERE kind = NEW.kind;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT octet_length(NEW.payload::text) <= s.payload_limit - 4096 INTO fits
    FROM job.settings s;
    BEGIN
        INSERT INTO job.jobs (kind, queue, payload, tenant, trace_context)
        VALUES (
            c.compensate_kind,
            c.compensate_queue,
            jsonb_build_object('discarded', jsonb_build_object(
                'job_id', NEW.id,
                'kind', NEW.kind,
                'payload', CASE WHEN coalesce(fits, false) THEN NEW.payload END,
                'payload_omitted', NOT coalesce(fits, false),
                'error', NEW.errors -> -1)),
            NEW.tenant,
            NEW.trace_context
        );
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'job %: compensating job % not enqueued: %', NEW.id, c.compensate_kind,
            SQLERRM;
    END;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_compensate
    AFTER UPDATE OF state ON job.jobs
    FOR EACH ROW WHEN (NEW.state = 'discarded' AND OLD.state IS DISTINCT FROM 'discarded')
    EXECUTE FUNCTION job.compensate();

REVOKE ALL ON FUNCTION job.compensate() FROM PUBLIC;
