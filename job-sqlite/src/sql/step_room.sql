-- What job ?1 has recorded, read before a new step is saved in the same immediate
-- transaction (step_save.sql), so that a new name past the job's limits (job_core::MAX_STEPS,
-- MAX_STEPS_TOTAL) is refused: its steps, through the primary key, the bytes of their outputs,
-- read from the rows' headers (octet_length reads no overflow page), and whether ?2 is one of
-- them (a name already recorded keeps its first output and is never refused).
SELECT count(*),
       coalesce(sum(octet_length(output)), 0),
       coalesce(max(name = ?2), 0)
FROM job_steps
WHERE job_id = ?1
