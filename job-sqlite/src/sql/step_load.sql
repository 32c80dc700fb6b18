-- Every recorded step output of one job, by name, as JSON text. A read, so not guarded: the
-- guard is on the write (step_save.sql).
SELECT name, output FROM job_steps WHERE job_id = ?1
