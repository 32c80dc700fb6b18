-- 0013 settings row: job_settings keeps its one row, as job-postgres's `job.settings` does
-- (its migration 0025). Append-only: change the schema in a new numbered file.
--
-- Deleting the row (`DELETE FROM job_settings`, which nothing refused) turned the payload limit
-- off at every door (migration 0005's triggers compared against no row) and every compensating
-- job with it (job_jobs_compensate joined the missing row: no compensating job was inserted).
-- Now the delete is refused; a row deleted before this migration is put back with the default
-- limit; and the triggers read the limit as 1 MiB (the default) if the row is missing all the
-- same (the table dropped and made again by hand, say).
INSERT OR IGNORE INTO job_settings (one) VALUES (1);

CREATE TRIGGER job_settings_keep_row
BEFORE DELETE ON job_settings
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'job_settings keeps its one row: change the payload limit with `UPDATE job_settings SET payload_limit = ...`');
END;

DROP TRIGGER job_jobs_payload_limit_insert;
CREATE TRIGGER job_jobs_payload_limit_insert
BEFORE INSERT ON job_jobs
FOR EACH ROW WHEN length(CAST(NEW.payload AS BLOB))
    > coalesce((SELECT payload_limit FROM job_settings WHERE one = 1), 1048576)
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `payload` is over the payload limit (job_settings.payload_limit bytes)');
END;

DROP TRIGGER job_jobs_payload_limit_update;
CREATE TRIGGER job_jobs_payload_limit_update
BEFORE UPDATE OF payload ON job_jobs
FOR EACH ROW WHEN length(CAST(NEW.payload AS BLOB))
    > coalesce((SELECT payload_limit FROM job_settings WHERE one = 1), 1048576)
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `payload` is over the payload limit (job_settings.payload_limit bytes)');
END;

-- The compensating job of migration 0012, measured against the limit read the same way.
DROP TRIGGER job_jobs_compensate;
CREATE TRIGGER job_jobs_compensate
AFTER UPDATE OF state ON job_jobs
FOR EACH ROW WHEN NEW.state = 'discarded' AND OLD.state IS NOT 'discarded'
BEGIN
    INSERT INTO job_jobs (kind, queue, payload, run_at, state, tenant, created_at)
    SELECT c.compensate_kind, c.compensate_queue,
           CASE WHEN length(CAST(w.whole AS BLOB)) <= s.payload_limit
                     AND NOT n.payload_nul AND NOT n.error_nul
                     AND json_valid(w.whole) THEN w.whole
                WHEN length(CAST(w.omitted AS BLOB)) <= s.payload_limit
                     AND NOT n.error_nul
                     AND json_valid(w.omitted) THEN w.omitted
                ELSE w.bare END,
           t.now, 'available',
           CASE WHEN length(CAST(NEW.tenant AS BLOB)) BETWEEN 1 AND 128
                     AND instr(CAST(NEW.tenant AS BLOB), x'00') = 0
                     AND NOT (NEW.tenant GLOB '*[^!-~]*' AND NEW.tenant GLOB (SELECT pattern FROM job_forbidden_in_names))
                THEN NEW.tenant END,
           t.now
    FROM job_compensations c,
         (SELECT coalesce((SELECT payload_limit FROM job_settings WHERE one = 1), 1048576)
                 AS payload_limit) s,
         (SELECT CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000 AS now) t,
         (SELECT instr(CAST(NEW.payload AS BLOB), x'00') > 0
                 OR (instr(NEW.payload, '\u0000') > 0 AND instr(replace(NEW.payload, '\\', ''), '\u0000') > 0) AS payload_nul,
                 coalesce(instr(CAST(NEW.errors -> '$[#-1]' AS BLOB), x'00') > 0
                          OR instr(replace(NEW.errors -> '$[#-1]', '\\', ''), '\u0000') > 0,
                          0) AS error_nul) n,
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
      AND length(CAST(w.bare AS BLOB)) <= s.payload_limit
      AND length(CAST(c.compensate_kind AS BLOB)) BETWEEN 1 AND 128
      AND instr(CAST(c.compensate_kind AS BLOB), x'00') = 0
      AND NOT (c.compensate_kind GLOB '*[^!-~]*' AND c.compensate_kind GLOB (SELECT pattern FROM job_forbidden_in_names))
      AND length(CAST(c.compensate_queue AS BLOB)) BETWEEN 1 AND 128
      AND instr(CAST(c.compensate_queue AS BLOB), x'00') = 0
      AND NOT (c.compensate_queue GLOB '*[^!-~]*' AND c.compensate_queue GLOB (SELECT pattern FROM job_forbidden_in_names));
END;
