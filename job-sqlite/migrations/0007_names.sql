-- 0007 names, tags, keys: the rules of the README's "The rules of every door" that the Rust
-- API checks before writing (`job_core::name_problem` and the payload and key rules), checked by
-- triggers for every writer of the file, as job-postgres's admission trigger checks them: a
-- kind, queue, tenant or tag is 1 to 128 bytes without whitespace, control or format
-- characters (job_core::FORBIDDEN_IN_NAMES, as a GLOB class in job_forbidden_in_names; NUL is
-- checked apart, since a pattern cannot hold one); at most 32 tags, each a string; no NUL in a
-- unique key or, escaped or not, in a payload. Before, a raw write stored a kind with a newline
-- or a zero-width space, 40 numbers as tags and a payload holding `\u0000`. Each refusal names
-- its column; an UPDATE checks only the columns it changes, so rows stored before keep working.
-- Cost: a name of printable ASCII but space (most names) passes one GLOB of a single range
-- before the pattern is tried, a payload is copied (to read its escapes) only when it holds
-- the text `\u0000`, and empty tags are not walked: 50,000 single-row INSERTs of one
-- transaction ran at 62,000-65,000 rows/s with these triggers, 80,000-88,000 without (and
-- 54,000 before those shortcuts).
-- Append-only: change the schema in a new numbered file.

-- One row: the GLOB pattern matching a name that holds a forbidden character (but NUL).
CREATE TABLE job_forbidden_in_names (pattern TEXT NOT NULL) STRICT;
INSERT INTO job_forbidden_in_names (pattern)
SELECT
       '*[' || char(1) || '-' || char(32) || char(127) || '-' || char(160) || char(173) ||
       char(1536) || '-' || char(1541) || char(1564) || char(1757) || char(1807) ||
       char(2192) || '-' || char(2193) || char(2274) || char(5760) || char(6158) ||
       char(8192) || '-' || char(8207) || char(8232) || '-' || char(8239) || char(8287) ||
       '-' || char(8303) || char(12288) || char(65279) || char(65529) || '-' || char(65531) ||
       char(69821) || char(69837) || char(78896) || '-' || char(78911) || char(113824) ||
       '-' || char(113827) || char(119155) || '-' || char(119162) || char(917505) ||
       char(917536) || '-' || char(917631) || ']*';

CREATE TRIGGER job_jobs_names_insert
BEFORE INSERT ON job_jobs
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `kind` must be 1 to 128 bytes, without whitespace, control or format characters')
    WHERE length(CAST(NEW.kind AS BLOB)) NOT BETWEEN 1 AND 128
         OR instr(CAST(NEW.kind AS BLOB), x'00') > 0
         OR (NEW.kind GLOB '*[^!-~]*' AND NEW.kind GLOB (SELECT pattern FROM job_forbidden_in_names));
    SELECT RAISE(ABORT, 'job row refused: `queue` must be 1 to 128 bytes, without whitespace, control or format characters')
    WHERE length(CAST(NEW.queue AS BLOB)) NOT BETWEEN 1 AND 128
         OR instr(CAST(NEW.queue AS BLOB), x'00') > 0
         OR (NEW.queue GLOB '*[^!-~]*' AND NEW.queue GLOB (SELECT pattern FROM job_forbidden_in_names));
    SELECT RAISE(ABORT, 'job row refused: `tenant` must be 1 to 128 bytes, without whitespace, control or format characters')
    WHERE length(CAST(NEW.tenant AS BLOB)) NOT BETWEEN 1 AND 128
         OR instr(CAST(NEW.tenant AS BLOB), x'00') > 0
         OR (NEW.tenant GLOB '*[^!-~]*' AND NEW.tenant GLOB (SELECT pattern FROM job_forbidden_in_names));
    SELECT RAISE(ABORT, 'job row refused: `tags` must be at most 32 names of 1 to 128 bytes, without whitespace, control or format characters')
    WHERE json_array_length(NEW.tags) > 32
         OR (instr(NEW.tags, '\u0000') > 0 AND instr(replace(NEW.tags, '\\', ''), '\u0000') > 0)
         OR (json_array_length(NEW.tags) > 0 AND EXISTS (SELECT 1 FROM json_each(NEW.tags) t
                    WHERE t.type <> 'text'
                       OR length(CAST(t.value AS BLOB)) NOT BETWEEN 1 AND 128
                       OR (t.value GLOB '*[^!-~]*' AND t.value GLOB (SELECT pattern FROM job_forbidden_in_names))));
    SELECT RAISE(ABORT, 'job row refused: `unique_key` must not contain a NUL character')
    WHERE instr(CAST(NEW.unique_key AS BLOB), x'00') > 0;
    SELECT RAISE(ABORT, 'job row refused: `payload` must not contain a NUL character (\u0000)')
    WHERE instr(CAST(NEW.payload AS BLOB), x'00') > 0
         OR (instr(NEW.payload, '\u0000') > 0 AND instr(replace(NEW.payload, '\\', ''), '\u0000') > 0);
END;

CREATE TRIGGER job_jobs_names_update
BEFORE UPDATE OF kind, queue, tenant, tags, unique_key, payload ON job_jobs
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `kind` must be 1 to 128 bytes, without whitespace, control or format characters')
    WHERE NEW.kind IS NOT OLD.kind
      AND (length(CAST(NEW.kind AS BLOB)) NOT BETWEEN 1 AND 128
         OR instr(CAST(NEW.kind AS BLOB), x'00') > 0
         OR (NEW.kind GLOB '*[^!-~]*' AND NEW.kind GLOB (SELECT pattern FROM job_forbidden_in_names)));
    SELECT RAISE(ABORT, 'job row refused: `queue` must be 1 to 128 bytes, without whitespace, control or format characters')
    WHERE NEW.queue IS NOT OLD.queue
      AND (length(CAST(NEW.queue AS BLOB)) NOT BETWEEN 1 AND 128
         OR instr(CAST(NEW.queue AS BLOB), x'00') > 0
         OR (NEW.queue GLOB '*[^!-~]*' AND NEW.queue GLOB (SELECT pattern FROM job_forbidden_in_names)));
    SELECT RAISE(ABORT, 'job row refused: `tenant` must be 1 to 128 bytes, without whitespace, control or format characters')
    WHERE NEW.tenant IS NOT OLD.tenant
      AND (length(CAST(NEW.tenant AS BLOB)) NOT BETWEEN 1 AND 128
         OR instr(CAST(NEW.tenant AS BLOB), x'00') > 0
         OR (NEW.tenant GLOB '*[^!-~]*' AND NEW.tenant GLOB (SELECT pattern FROM job_forbidden_in_names)));
    SELECT RAISE(ABORT, 'job row refused: `tags` must be at most 32 names of 1 to 128 bytes, without whitespace, control or format characters')
    WHERE NEW.tags IS NOT OLD.tags
      AND (json_array_length(NEW.tags) > 32
         OR (instr(NEW.tags, '\u0000') > 0 AND instr(replace(NEW.tags, '\\', ''), '\u0000') > 0)
         OR (json_array_length(NEW.tags) > 0 AND EXISTS (SELECT 1 FROM json_each(NEW.tags) t
                    WHERE t.type <> 'text'
                       OR length(CAST(t.value AS BLOB)) NOT BETWEEN 1 AND 128
                       OR (t.value GLOB '*[^!-~]*' AND t.value GLOB (SELECT pattern FROM job_forbidden_in_names)))));
    SELECT RAISE(ABORT, 'job row refused: `unique_key` must not contain a NUL character')
    WHERE NEW.unique_key IS NOT OLD.unique_key
      AND (instr(CAST(NEW.unique_key AS BLOB), x'00') > 0);
    SELECT RAISE(ABORT, 'job row refused: `payload` must not contain a NUL character (\u0000)')
    WHERE NEW.payload IS NOT OLD.payload
      AND (instr(CAST(NEW.payload AS BLOB), x'00') > 0
         OR (instr(NEW.payload, '\u0000') > 0 AND instr(replace(NEW.payload, '\\', ''), '\u0000') > 0));
END;

-- job_compensations is written by workers from their kinds' options (names the Rust API
-- checked); a raw write there is held to the same rules, since a compensating job of a kind
-- or queue the rules refuse would make every discard of its kind fail.
CREATE TRIGGER job_compensations_names
BEFORE INSERT ON job_compensations
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'compensation refused: `compensate_kind` and `compensate_queue` must be 1 to 128 bytes, without whitespace, control or format characters')
    WHERE length(CAST(NEW.compensate_kind AS BLOB)) NOT BETWEEN 1 AND 128
       OR instr(CAST(NEW.compensate_kind AS BLOB), x'00') > 0
       OR (NEW.compensate_kind GLOB '*[^!-~]*' AND NEW.compensate_kind GLOB (SELECT pattern FROM job_forbidden_in_names))
       OR length(CAST(NEW.compensate_queue AS BLOB)) NOT BETWEEN 1 AND 128
       OR instr(CAST(NEW.compensate_queue AS BLOB), x'00') > 0
       OR (NEW.compensate_queue GLOB '*[^!-~]*' AND NEW.compensate_queue GLOB (SELECT pattern FROM job_forbidden_in_names));
END;

CREATE TRIGGER job_compensations_names_update
BEFORE UPDATE OF compensate_kind, compensate_queue ON job_compensations
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'compensation refused: `compensate_kind` and `compensate_queue` must be 1 to 128 bytes, without whitespace, control or format characters')
    WHERE length(CAST(NEW.compensate_kind AS BLOB)) NOT BETWEEN 1 AND 128
       OR instr(CAST(NEW.compensate_kind AS BLOB), x'00') > 0
       OR (NEW.compensate_kind GLOB '*[^!-~]*' AND NEW.compensate_kind GLOB (SELECT pattern FROM job_forbidden_in_names))
       OR length(CAST(NEW.compensate_queue AS BLOB)) NOT BETWEEN 1 AND 128
       OR instr(CAST(NEW.compensate_queue AS BLOB), x'00') > 0
       OR (NEW.compensate_queue GLOB '*[^!-~]*' AND NEW.compensate_queue GLOB (SELECT pattern FROM job_forbidden_in_names));
END;

-- The compensating job never breaks the discard that inserts it. A row stored before these
-- rules may hold what they refuse: its payload (or last error) with a NUL is left out of the
-- wrapping, as an oversized one is (`payload_omitted: true`), and a tenant the rules refuse is
-- not copied. A compensation row written raw before this migration with a name the rules
-- refuse gives no compensating job (the worker that registers the kind rewrites the row).
DROP TRIGGER job_jobs_compensate;
CREATE TRIGGER job_jobs_compensate
AFTER UPDATE OF state ON job_jobs
FOR EACH ROW WHEN NEW.state = 'discarded' AND OLD.state IS NOT 'discarded'
BEGIN
    INSERT INTO job_jobs (kind, queue, payload, run_at, state, tenant, created_at)
    SELECT c.compensate_kind, c.compensate_queue,
           CASE WHEN length(CAST(w.whole AS BLOB)) <= s.payload_limit
                     AND NOT n.payload_nul AND NOT n.error_nul THEN w.whole
                WHEN length(CAST(w.omitted AS BLOB)) <= s.payload_limit
                     AND NOT n.error_nul THEN w.omitted
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
