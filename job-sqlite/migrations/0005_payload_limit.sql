-- 0005 payload limit: every door bounds a payload, as job-postgres's `job.settings` (migration
-- 0005 there) does: job_settings holds one row, payload_limit (1 MiB unless changed with
-- `UPDATE job_settings SET payload_limit = ...`), and the triggers below refuse an inserted
-- or updated payload over it, whoever writes it (the store, a typed enqueue through a
-- connection, a raw INSERT). Rows already stored keep what they have: only an INSERT and an
-- UPDATE of `payload` are checked. The compensating job of migration 0003 is measured whole
-- against the same limit, as job-postgres's `job.compensate` (migration 0022): the discarded
-- payload goes in when the wrapping fits, else it is omitted (`payload_omitted: true`), and
-- the last error too when even that does not fit; without this a compensating job was
-- unbounded, and with the limit an oversized one would have refused the discard itself.
-- Append-only: change the schema in a new numbered file.

CREATE TABLE job_settings (
    one           INTEGER PRIMARY KEY CHECK (one = 1),
    payload_limit INTEGER NOT NULL DEFAULT 1048576 CHECK (payload_limit BETWEEN 2 AND 268435455)
) STRICT;
INSERT INTO job_settings (one) VALUES (1);

CREATE TRIGGER job_jobs_payload_limit_insert
BEFORE INSERT ON job_jobs
FOR EACH ROW WHEN length(CAST(NEW.payload AS BLOB))
    > (SELECT payload_limit FROM job_settings WHERE one = 1)
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `payload` is over the payload limit (job_settings.payload_limit bytes)');
END;

CREATE TRIGGER job_jobs_payload_limit_update
BEFORE UPDATE OF payload ON job_jobs
FOR EACH ROW WHEN length(CAST(NEW.payload AS BLOB))
    > (SELECT payload_limit FROM job_settings WHERE one = 1)
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `payload` is over the payload limit (job_settings.payload_limit bytes)');
END;

DROP TRIGGER job_jobs_compensate;
CREATE TRIGGER job_jobs_compensate
AFTER UPDATE OF state ON job_jobs
FOR EACH ROW WHEN NEW.state = 'discarded' AND OLD.state IS NOT 'discarded'
BEGIN
    INSERT INTO job_jobs (kind, queue, payload, run_at, state, tenant, created_at)
    SELECT c.compensate_kind, c.compensate_queue,
           CASE WHEN length(CAST(w.whole AS BLOB)) <= s.payload_limit THEN w.whole
                WHEN length(CAST(w.omitted AS BLOB)) <= s.payload_limit THEN w.omitted
                ELSE w.bare END,
           t.now, 'available', NEW.tenant, t.now
    FROM job_compensations c,
         job_settings s,
         (SELECT CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000 AS now) t,
         (SELECT json_object('discarded', json_object(
                     'job_id', NEW.id,
                     'kind', NEW.kind,
                     'payload', json(NEW.payload),
                     'payload_omitted', json('false'),
                     'error', json(NEW.errors -> '$[#-1]'))) AS whole,
                 json_object('discarded', json_object(
                     'job_id', NEW.id,
                     'kind', NEW.kind,
                     'payload', NULL,
                     'payload_omitted', json('true'),
                     'error', json(NEW.errors -> '$[#-1]'))) AS omitted,
                 json_object('discarded', json_object(
                     'job_id', NEW.id,
                     'kind', NEW.kind,
                     'payload', NULL,
                     'payload_omitted', json('true'),
                     'error', NULL)) AS bare) w
    WHERE c.kind = NEW.kind
      AND s.one = 1
      -- a limit too small for even the bare wrapping: no compensating job rather than no
      -- discard
      AND length(CAST(w.bare AS BLOB)) <= s.payload_limit;
END;
