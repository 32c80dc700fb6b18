-- Experiment setup (`--raw-setup-sql`): drops every CHECK constraint of job.jobs and every
-- trigger of its own but the insert notification, in the benchmark's own database, to measure
-- what they cost each claim and finalize. Never on a database that matters.
DO $$
DECLARE c record;
BEGIN
    FOR c IN SELECT conname FROM pg_constraint
             WHERE conrelid = 'job.jobs'::regclass AND contype = 'c' LOOP
        EXECUTE format('ALTER TABLE job.jobs DROP CONSTRAINT %I', c.conname);
    END LOOP;
    FOR c IN SELECT tgname FROM pg_trigger
             WHERE tgrelid = 'job.jobs'::regclass AND NOT tgisinternal
               AND tgname <> 'jobs_notify_insert' LOOP
        EXECUTE format('DROP TRIGGER %I ON job.jobs', c.tgname);
    END LOOP;
END $$;
