-- What a guarded write needs of a job whose lease (?1 id, ?2 lock_token) is held, running:
-- no row means the lease was lost. `unstarted_last`: a last attempt whose start was not
-- recorded under this lease (record_start.sql), which the rescuer does not count.
SELECT attempt, errors, locked_by, locked_until, run_at, cancel_requested,
       attempt >= max_attempts AND started_lease IS NOT lock_token AS unstarted_last
FROM job_jobs
WHERE id = ?1 AND lock_token = ?2 AND state = 'running'
