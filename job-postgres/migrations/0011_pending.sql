-- 0011 pending: a state for jobs that wait on something other than time (an earlier job of
-- their ordering key, migration 0012). A state of its own so that no claim, stage or rescue
-- reads them: jobs_claim_idx, jobs_due_idx and jobs_rescue_idx do not hold pending rows.
-- Alone in its migration: a new enum value cannot be used in the transaction that adds it.
-- Append-only: change the schema in a new numbered file.

ALTER TYPE job.job_state ADD VALUE IF NOT EXISTS 'pending' BEFORE 'scheduled';
