-- 0016 compensating options: a compensating job is enqueued with its own kind's options (as
-- job-postgres's migration 0039). Append-only: change the schema in a new numbered file.
--
-- job_jobs_compensate inserted only the compensating job's kind, queue, payload and tenant,
-- so the table's defaults applied: 25 attempts, priority 0, payload version 1, whatever the
-- compensating kind said. A compensating kind at `VERSION = 2` had every compensation
-- discarded as poison ("payload version 1 ... has no upgrade to version 2"). Workers now
-- record, beside the kind and queue, the compensating kind's priority, max_attempts and
-- payload version (`Compensate::of`), and the trigger enqueues with them. The columns are
-- nullable: a row recorded by an older worker (whose statement names only the first three
-- columns, and still succeeds) keeps the old defaults until a newer worker records it again.
--
-- The wrapping's third form (payload and last error omitted) now says that the error was
-- omitted (`"error_omitted": true`, when the job had one), as job-postgres's does.
ALTER TABLE job_compensations ADD COLUMN compensate_priority INTEGER
    CHECK (compensate_priority BETWEEN 0 AND 32767);
ALTER TABLE job_compensations ADD COLUMN compensate_max_attempts INTEGER
    CHECK (compensate_max_attempts BETWEEN 1 AND 2147483647);
ALTER TABLE job_compensations ADD COLUMN compensate_version INTEGER
    CHECK (compensate_version BETWEEN 1 AND 2147483647);

-- The trigger of migration 0013, with the three options and the flag.
DROP TRIGGER job_jobs_compensate;
CREATE TRIGGER job_jobs_compensate
AFTER UPDATE OF state ON job_jobs
FOR EACH ROW WHEN NEW.state = 'discarded' AND OLD.state IS NOT 'discarded'
BEGIN
    INSERT INTO job_jobs (kind, queue, priority, max_attempts, payload_version, payload, run_at,
                          state, tenant, created_at)
    SELECT c.compensate_kind, c.compensate_queue,
           coalesce(c.compensate_priority, 0), coalesce(c.compensate_max_attempts, 25),
           coalesce(c.compensate_version, 1),
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
                     'error', json(NEW.errors -> '$[#-1]'),
                     'error_omitted', json('false'))) AS whole,
                 json_object('discarded', json_object(
                     'job_id', NEW.id,
                     'kind', NEW.kind,
                     'payload', NULL,
                     'payload_omitted', json('true'),
                     'error', json(NEW.errors -> '$[#-1]'),
                     'error_omitted', json('false'))) AS omitted,
                 json_object('discarded', json_object(
                     'job_id', NEW.id,
                     'kind', NEW.kind,
                     'payload', NULL,
                     'payload_omitted', json('true'),
                     'error', NULL,
                     'error_omitted', json(CASE WHEN NEW.errors -> '$[#-1]' IS NULL THEN 'false' ELSE 'true' END))) AS bare) w
    WHERE c.kind = NEW.kind
      AND length(CAST(w.bare AS BLOB)) <= s.payload_limit
      AND length(CAST(c.compensate_kind AS BLOB)) BETWEEN 1 AND 128
      AND instr(CAST(c.compensate_kind AS BLOB), x'00') = 0
      AND NOT (c.compensate_kind GLOB '*[^!-~]*' AND c.compensate_kind GLOB (SELECT pattern FROM job_forbidden_in_names))
      AND length(CAST(c.compensate_queue AS BLOB)) BETWEEN 1 AND 128
      AND instr(CAST(c.compensate_queue AS BLOB), x'00') = 0
      AND NOT (c.compensate_queue GLOB '*[^!-~]*' AND c.compensate_queue GLOB (SELECT pattern FROM job_forbidden_in_names));
END;
