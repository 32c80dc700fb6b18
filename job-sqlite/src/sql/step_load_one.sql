-- The recorded output of step ?2 of job ?1, as JSON text (no row: not recorded). A read, so not
-- guarded: the guard is on the write (step_save.sql).
SELECT output FROM job_steps WHERE job_id = ?1 AND name = ?2
