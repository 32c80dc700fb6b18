-- What job ?1 has recorded, read before a new step is saved in the same immediate
-- transaction (step_save.sql), so that a new name past the job's limits (job_core::MAX_STEPS,
-- MAX_STEPS_TOTAL) is refused: its steps and the bytes of their outputs, from its row of
-- job_step_totals (migration 0021: triggers keep it, so a save reads the same few rows however
-- many steps the job has, where counting them held the write lock longer with every step),
-- and whether ?2 is one of them, by one probe of the primary key (a name already recorded
-- keeps its first output and is never refused).
SELECT coalesce((SELECT t.steps FROM job_step_totals t WHERE t.job_id = ?1), 0),
       coalesce((SELECT t.bytes FROM job_step_totals t WHERE t.job_id = ?1), 0),
       EXISTS (SELECT 1 FROM job_steps s WHERE s.job_id = ?1 AND s.name = ?2)
