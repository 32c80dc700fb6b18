-- 0012 deep payloads: a discard never fails on the depth of what its compensating job wraps.
-- Append-only: change the schema in a new numbered file.
--
-- SQLite's JSON holds at most 1000 levels of nesting, and job_jobs's CHECK (json_valid)
-- accepts a payload up to that depth (a raw INSERT, or `job_sqlite::enqueue` with a NewJob
-- that skipped its checks, stores one). Its compensating job wraps it two levels deeper,
-- `{"discarded": {"payload": ...}}`: for a payload 999 or 1000 levels deep that text is not
-- valid JSON, the compensating row failed its CHECK, and with it the discard. The rescuer and
-- the expirer, which pick that row first every pass, then failed every pass. Now the payload
-- goes in only when the wrapping is valid JSON, else the payload is omitted (`payload_omitted:
-- true`) as for one over the limit; the same for a last error nested as deep.
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
         job_settings s,
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
      AND s.one = 1
      AND length(CAST(w.bare AS BLOB)) <= s.payload_limit
      AND length(CAST(c.compensate_kind AS BLOB)) BETWEEN 1 AND 128
      AND instr(CAST(c.compensate_kind AS BLOB), x'00') = 0
      AND NOT (c.compensate_kind GLOB '*[^!-~]*' AND c.compensate_kind GLOB (SELECT pattern FROM job_forbidden_in_names))
      AND length(CAST(c.compensate_queue AS BLOB)) BETWEEN 1 AND 128
      AND instr(CAST(c.compensate_queue AS BLOB), x'00') = 0
      AND NOT (c.compensate_queue GLOB '*[^!-~]*' AND c.compensate_queue GLOB (SELECT pattern FROM job_forbidden_in_names));
END;
