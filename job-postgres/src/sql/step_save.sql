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
-- A new name is recorded only while the job has fewer than $5 steps and its outputs with this
-- one add up to at most $6 bytes (job_core::MAX_STEPS, MAX_STEPS_TOTAL): the job's count and
-- bytes are read from its row of job.step_totals, which triggers on job.steps keep (migration
-- 0062; a step's size is its output_bytes, or the length of the JSON text of a row written
-- before migration 0049 or by a writer that does not set it), and whether the name is
-- recorded by one probe of the primary key: a save reads the same few rows however many steps
-- the job has (it counted them all). The totals row is locked here, SKIP LOCKED as the guard
-- row is: the insert's trigger writes it, and another transaction that wrote steps of the job
-- and is still open (an operator's, or a second session holding the lease) holds it, so the
-- save is skipped as busy rather than wait for that transaction (or deadlock with it). A job
-- without steps has no totals row. Steps of one job saved at the same moment each count what
-- was committed before them, so the limits can be passed by the saves in flight at once (a
-- worker's share one connection: one at a time).
-- Returns (held, running, steps, bytes): held 1 when the lease was held (recorded, already
-- there, or refused); otherwise running 1 when the row was skipped with the lease still on it
-- (or its totals row), 0 when it was lost. steps and bytes, what the job has recorded, only
-- when the new step was refused for its limits.
WITH guard AS (
    SELECT id, attempt
    FROM job.jobs
    WHERE id = $1 AND lock_token = $2 AND state = 'running'
    FOR SHARE SKIP LOCKED
), totals AS (
    SELECT t.steps, t.bytes
    FROM job.step_totals t
    WHERE t.job_id = (SELECT id FROM guard)
    FOR UPDATE SKIP LOCKED
), held AS (
    SELECT g.id, g.attempt
    FROM guard g
    WHERE EXISTS (SELECT 1 FROM totals)
       OR NOT EXISTS (SELECT 1 FROM job.step_totals t WHERE t.job_id = g.id)
), recorded_before AS (
    SELECT coalesce((SELECT t.steps::bigint FROM totals t), 0) AS steps,
           coalesce((SELECT t.bytes FROM totals t), 0) AS bytes,
           EXISTS (SELECT 1 FROM job.steps s WHERE s.job_id = h.id AND s.name = $3) AS named
    FROM held h
), refused AS (
    SELECT steps, bytes
    FROM recorded_before
    WHERE NOT named AND (steps >= $5 OR bytes + octet_length($4::text) > $6)
), recorded AS (
    INSERT INTO job.steps (job_id, name, output, attempt, output_bytes)
    SELECT held.id, $3, $4::jsonb, held.attempt, octet_length($4::text)
    FROM held
    WHERE NOT EXISTS (SELECT FROM refused)
    ON CONFLICT (job_id, name) DO NOTHING
)
SELECT (SELECT count(*) FROM held) AS held,
       (SELECT count(*) FROM job.jobs
        WHERE id = $1 AND lock_token = $2 AND state = 'running') AS running,
       (SELECT steps FROM refused) AS steps,
       (SELECT bytes::bigint FROM refused) AS bytes
