-- 0010 running scope: a running row's unique scope is not `started`. Only the claim turns
-- `started` into `spent`, as the row starts; a raw write that skips the claim left a running row
-- `started`, outside the unique index's `started` scope, so a second job of the key was let in,
-- and the rescue that brought the running row back to retryable then broke the unique index:
-- every rescue pass failed, and no expired lease of the file was rescued any more (a release
-- holding the row failed the same way). Such rows are repaired as the claim would have made
-- them, then an INSERT or UPDATE that makes one is refused (job-postgres's 0027 does the same).
-- Append-only: change the schema in a new numbered file.

UPDATE job_jobs SET unique_scope = 'spent'
WHERE state = 'running' AND unique_scope = 'started';

CREATE TRIGGER job_jobs_running_scope_insert
BEFORE INSERT ON job_jobs
FOR EACH ROW WHEN NEW.state = 'running' AND NEW.unique_scope = 'started'
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `unique_scope` of a running row cannot be ''started'' (the claim makes it ''spent'')');
END;

CREATE TRIGGER job_jobs_running_scope_update
BEFORE UPDATE OF state, unique_scope ON job_jobs
FOR EACH ROW WHEN NEW.state = 'running' AND NEW.unique_scope = 'started'
BEGIN
    SELECT RAISE(ABORT, 'job row refused: `unique_scope` of a running row cannot be ''started'' (the claim makes it ''spent'')');
END;
