-- 0058 ordering_admit_by_index: the admission of a keyed job reads its key's unfinished jobs
-- through the key's two partial indexes, not the whole table. Append-only: change the schema
-- in a new numbered file.
--
-- job.ordering_admit (migrations 0012 and 0034), the trigger that makes a keyed job pending
-- when another unfinished job holds its key, asked for jobs of the key in any of five states
-- in one test. No index holds those five: jobs_ordering_head_idx holds the heads (scheduled,
-- available, running, retryable) and jobs_ordering_pending_idx the pending jobs, and the
-- planner cannot split a state list between two partial indexes, so every keyed INSERT (and
-- every job.set_ordering_key, and every redrive of a keyed job) read all of job.jobs, the
-- finished jobs kept for retention included: with 200,000 completed jobs kept, one keyed
-- job.enqueue took 32-37 ms where an unkeyed one takes 1 ms, and job.enqueue_many of 100 keyed
-- jobs 3.2 s; into an empty table a bulk enqueue of keyed jobs grew with the square of its
-- size (16,000 jobs: 18.4 s), holding meanwhile the key locks it had taken, which every other
-- keyed enqueue waits for. Found by a probe of the SQL doors. The test is now two, one per
-- index: an index probe each, whatever the table holds.
--
-- Also: a running job given a key another unfinished job holds (job.set_ordering_key, or a raw
-- UPDATE of ordering_key) was made pending while it held a lease, which the table's
-- jobs_lease_check refused with the whole row in the error's detail, naming neither the job
-- nor the key. It is now refused first, with 55000 (object_not_in_prerequisite_state) naming
-- the job, its state and the key (as job.shown shows a value): a key is given before the job
-- starts. What is refused is unchanged.
--
-- CREATE OR REPLACE keeps the function's owner, its grants (none to PUBLIC) and its triggers.

CREATE OR REPLACE FUNCTION job.ordering_admit() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(job.ordering_lock_key(NEW.ordering_key));
    IF TG_OP = 'INSERT' THEN
        -- The id was drawn before this lock was taken, so a transaction that waited for it
        -- could hold a lower id than the one it waited for. Draw it again: the ids of a key
        -- then follow the order in which their enqueuers took the key's lock, and "enqueue
        -- order" is id order. Rows inserted one after the other in one statement still get
        -- ascending ids (enqueue_many maps ids to inputs by that).
        NEW.id := nextval(pg_get_serial_sequence('job.jobs', 'id'));
    END IF;
    -- Two tests, each read through its partial index (jobs_ordering_head_idx, then
    -- jobs_ordering_pending_idx): one over the five states reads the whole table.
    IF EXISTS (SELECT 1 FROM job.jobs o
               WHERE o.ordering_key = NEW.ordering_key AND o.id <> NEW.id
                 AND o.state IN ('scheduled', 'available', 'running', 'retryable'))
       OR EXISTS (SELECT 1 FROM job.jobs o
                  WHERE o.ordering_key = NEW.ordering_key AND o.id <> NEW.id
                    AND o.state = 'pending')
    THEN
        IF NEW.state = 'running' THEN
            RAISE EXCEPTION 'job % is running, so it cannot wait behind ordering key `%`, which another unfinished job holds: give a job its key before it starts',
                    NEW.id, job.shown(NEW.ordering_key)
                USING ERRCODE = 'object_not_in_prerequisite_state', COLUMN = 'ordering_key';
        END IF;
        NEW.state := 'pending';
        -- Under READ COMMITTED an entry this statement sees stays until after this commit
        -- (the stager deletes entries under the key's lock, which this transaction holds); an
        -- older snapshot may show one deleted since.
        PERFORM job.ordering_wake_later(
            NEW.ordering_key, current_setting('transaction_isolation') <> 'read committed');
    END IF;
    RETURN NEW;
END
$$;
