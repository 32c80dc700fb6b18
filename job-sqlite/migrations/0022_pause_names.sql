-- 0022 pause_names: job_pauses takes only the names a queue or kind can have, from any writer
-- of the file, as job_jobs does since 0007 (job-postgres's migration 0065 does the same for
-- job.pauses). The Rust side refuses to pause such a name (`Pause::check`); a pause written by
-- hand under one (`'mail '`) paused nothing and was listed as in force. Rows stored before are
-- left: `Admin::resume` deletes a pause whatever its name. The same cost as 0007's: a name of
-- printable ASCII but space passes one GLOB of a single range before the pattern is tried.
-- Append-only: change the schema in a new numbered file.

CREATE TRIGGER job_pauses_names_insert
BEFORE INSERT ON job_pauses
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'pause refused: the name must be 1 to 128 bytes, without whitespace, control or format characters')
    WHERE length(CAST(NEW.name AS BLOB)) NOT BETWEEN 1 AND 128
         OR instr(CAST(NEW.name AS BLOB), x'00') > 0
         OR (NEW.name GLOB '*[^!-~]*' AND NEW.name GLOB (SELECT pattern FROM job_forbidden_in_names));
END;

CREATE TRIGGER job_pauses_names_update
BEFORE UPDATE OF name ON job_pauses
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'pause refused: the name must be 1 to 128 bytes, without whitespace, control or format characters')
    WHERE length(CAST(NEW.name AS BLOB)) NOT BETWEEN 1 AND 128
         OR instr(CAST(NEW.name AS BLOB), x'00') > 0
         OR (NEW.name GLOB '*[^!-~]*' AND NEW.name GLOB (SELECT pattern FROM job_forbidden_in_names));
END;
