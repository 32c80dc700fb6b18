-- 0034 ordering_snapshots: a key's pending job is never stranded by a transaction that reads
-- an old snapshot. Append-only: change the schema in a new numbered file.
--
-- Both triggers of per-key ordering (migration 0012) decided from what their statement's
-- snapshot shows. Under READ COMMITTED a statement's snapshot is taken after the key's lock,
-- and shows whatever the lock's last holder committed. Under REPEATABLE READ or SERIALIZABLE it
-- is the transaction's first, possibly older than the lock, and two cases left a pending job
-- with no head and no wake-up entry, waiting until another job of its key was enqueued:
--
-- 1. A head finished in such a transaction (`complete_in` in the application's REPEATABLE READ
--    transaction, say) while a job of its key was enqueued after the snapshot: the release
--    trigger's promotion did not see that job, and promoted nothing; the key's wake-up entry,
--    written by that enqueue, had been deleted by a stager pass that ran while the head still
--    ran. The release now also puts the key on the wake-up list whenever such a transaction's
--    promotion promoted nothing, for the stager to look again after its commit.
-- 2. A job enqueued in such a transaction found the key's head in its snapshot (finished since)
--    and became pending, and skipped writing the key's wake-up entry because the snapshot
--    still showed one (deleted since by a stager pass). The admit trigger now writes the entry
--    whatever such a snapshot shows (a duplicate is forgotten by the stager with the rest).
--
-- Under READ COMMITTED nothing changes.

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
    IF EXISTS (SELECT 1 FROM job.jobs o
               WHERE o.ordering_key = NEW.ordering_key AND o.id <> NEW.id
                 AND o.state IN ('pending', 'scheduled', 'available', 'running', 'retryable'))
    THEN
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

CREATE OR REPLACE FUNCTION job.ordering_release() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_try_advisory_xact_lock(job.ordering_lock_key(OLD.ordering_key)) THEN
        -- A snapshot older than the lock may miss a job of the key enqueued since: the stager
        -- looks again after this commit.
        IF NOT job.ordering_promote(OLD.ordering_key)
           AND current_setting('transaction_isolation') <> 'read committed' THEN
            PERFORM job.ordering_wake_later(OLD.ordering_key, true);
        END IF;
    ELSE
        PERFORM job.ordering_wake_later(OLD.ordering_key, true);
    END IF;
    RETURN NULL;
END
$$;
