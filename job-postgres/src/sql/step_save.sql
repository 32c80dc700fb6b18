-- Records one step's output ($3 name, $4 JSON text, whose size in bytes is stored with it:
-- migration 0049), guarded by (id, lock_token) and running:
-- the insert selects from the guard row, so a lost lease inserts nothing. The guard row is
-- locked FOR SHARE, which orders the write against a concurrent rescue, finalize or release of
-- the same row: either the step commits while the lease is held (and the job's next attempt,
-- claimed after the lease changed hands, sees it) or the lease changed first and nothing is
-- recorded. A name already recorded keeps its first output. A row another transaction holds
-- (the handler's own open transaction, an operator's session, a heartbeat's update a moment)
-- is skipped, not waited for: the worker's step writes share one connection, so a wait here
-- would hold up every step of the worker; the caller tries again while the lease is held.
-- Returns (held, running): held 1 when the lease was held (recorded, or already there);
-- otherwise running 1 when the row was skipped with the lease still on it, 0 when it was lost.
WITH held AS (
    SELECT id, attempt
    FROM job.jobs
    WHERE id = $1 AND lock_token = $2 AND state = 'running'
    FOR SHARE SKIP LOCKED
), recorded AS (
    INSERT INTO job.steps (job_id, name, output, attempt, output_bytes)
    SELECT held.id, $3, $4::jsonb, held.attempt, octet_length($4::text)
    FROM held
    ON CONFLICT (job_id, name) DO NOTHING
)
SELECT (SELECT count(*) FROM held) AS held,
       (SELECT count(*) FROM job.jobs
        WHERE id = $1 AND lock_token = $2 AND state = 'running') AS running
