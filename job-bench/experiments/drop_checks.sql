-- Experiment setup (`--raw-setup-sql`): drops every CHECK constraint of job.jobs in the
-- benchmark's own database, to measure what they cost each claim and finalize. Never on a
-- database that matters: the CHECKs are what refuse bad rows from any writer.
DO $$
DECLARE c record;
BEGIN
    FOR c IN SELECT conname FROM pg_constraint
             WHERE conrelid = 'job.jobs'::regclass AND contype = 'c' LOOP
        EXECUTE format('ALTER TABLE job.jobs DROP CONSTRAINT %I', c.conname);
    END LOOP;
END $$;
