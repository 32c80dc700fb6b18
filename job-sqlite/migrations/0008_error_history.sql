-- 0008 error history: bounded for every writer, as job-postgres's migration 0025 bounds it.
-- The store keeps a history to the first and latest entries, 20 in all, each message cut to
-- 8 KiB, and cuts any entry it keeps that is over 64 KiB (history.rs); a raw write could store
-- a history of any size (3 MB was accepted), which every read of the job then carried. Now
-- an INSERT, and an UPDATE that changes `errors`, is refused over 20 entries or 2 MiB of JSON
-- text. A row stored before keeps its history until its next error, whose write cuts it.
-- Append-only: change the schema in a new numbered file.

CREATE TRIGGER job_jobs_errors_insert
BEFORE INSERT ON job_jobs
FOR EACH ROW WHEN json_array_length(NEW.errors) > 20 OR length(CAST(NEW.errors AS BLOB)) > 2097152
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `errors` must hold at most 20 entries and 2097152 bytes');
END;

CREATE TRIGGER job_jobs_errors_update
BEFORE UPDATE OF errors ON job_jobs
FOR EACH ROW WHEN NEW.errors IS NOT OLD.errors
    AND (json_array_length(NEW.errors) > 20 OR length(CAST(NEW.errors AS BLOB)) > 2097152)
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `errors` must hold at most 20 entries and 2097152 bytes');
END;
