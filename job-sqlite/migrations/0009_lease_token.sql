-- 0009 lease token: 16 bytes, for every writer. The store writes a UUID; a raw write could
-- store any blob, and one running row with a token of another length made every rescue pass
-- fail (its pick reads the tokens as UUIDs), so no expired lease was rescued any more, and
-- every listing that held the row failed. Such a token was never a worker's: no worker's
-- guarded write can match it, so it is replaced by a fresh one, which leaves the lease to run
-- out and the rescuer to take it. Then an INSERT, and an UPDATE of `lock_token`, is refused
-- with a token of another length.
-- Append-only: change the schema in a new numbered file.

UPDATE job_jobs SET lock_token = randomblob(16)
WHERE lock_token IS NOT NULL AND length(lock_token) <> 16;

CREATE TRIGGER job_jobs_token_insert
BEFORE INSERT ON job_jobs
FOR EACH ROW WHEN NEW.lock_token IS NOT NULL AND length(NEW.lock_token) <> 16
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `lock_token` must be 16 bytes (a UUID)');
END;

CREATE TRIGGER job_jobs_token_update
BEFORE UPDATE OF lock_token ON job_jobs
FOR EACH ROW WHEN NEW.lock_token IS NOT NULL AND length(NEW.lock_token) <> 16
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `lock_token` must be 16 bytes (a UUID)');
END;
