-- 0003 compensation: a kind's compensating job, enqueued in the same transaction that
-- discards a job of the kind (as job-postgres's migration 0014): job_compensations maps a
-- kind to its compensating job's kind and queue (written by workers before they claim), and
-- the trigger job_jobs_compensate, which fires only when a row becomes `discarded`, inserts
-- the compensating job with a payload `{"discarded": {"job_id", "kind", "payload",
-- "payload_omitted", "error"}}` (`error`: the last entry of the history, or null).
-- Append-only: change the schema in a new numbered file.

CREATE TABLE job_compensations (
    kind             TEXT PRIMARY KEY CHECK (length(CAST(kind AS BLOB)) BETWEEN 1 AND 128),
    compensate_kind  TEXT NOT NULL CHECK (length(CAST(compensate_kind AS BLOB)) BETWEEN 1 AND 128),
    compensate_queue TEXT NOT NULL CHECK (length(CAST(compensate_queue AS BLOB)) BETWEEN 1 AND 128)
);

CREATE TRIGGER job_jobs_compensate
AFTER UPDATE OF state ON job_jobs
FOR EACH ROW WHEN NEW.state = 'discarded' AND OLD.state IS NOT 'discarded'
BEGIN
    INSERT INTO job_jobs (kind, queue, payload, run_at, state, tenant, created_at)
    SELECT c.compensate_kind, c.compensate_queue,
           json_object('discarded', json_object(
               'job_id', NEW.id,
               'kind', NEW.kind,
               'payload', json(NEW.payload),
               'payload_omitted', json('false'),
               'error', json(json_extract(NEW.errors, '$[#-1]')))),
           t.now, 'available', NEW.tenant, t.now
    FROM job_compensations c,
         (SELECT CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000 AS now) t
    WHERE c.kind = NEW.kind;
END;
