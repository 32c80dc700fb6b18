-- 0012 ordering: per-key ordering. Jobs with the same `ordering_key` run one at a time, in
-- enqueue order (id order), across every worker; different keys run in parallel. Append-only:
-- change the schema in a new numbered file.
--
-- Of a key's unfinished jobs exactly one, the head, is in a claimable lifecycle (scheduled,
-- available, running or retryable); the others are `pending`, which no claim reads. So the
-- claim is unchanged: it never looks at keys, and jobs without a key pay nothing but a NULL
-- column. The database enforces the rule:
--
-- * jobs_ordering_head_idx, a unique index over the heads, refuses a second head whatever
--   writes it;
-- * the trigger jobs_ordering_admit (BEFORE INSERT, and BEFORE an UPDATE that brings a finished
--   job back, a redrive) makes a keyed row pending when its key has an unfinished job. It first
--   takes the key's transaction-scoped advisory lock, so that two transactions enqueueing one
--   key run that part one after the other, and the second sees the first's row (under READ
--   COMMITTED; a REPEATABLE READ enqueuer that cannot see it is refused by the unique index and
--   retries);
-- * the trigger jobs_ordering_release (AFTER the head finishes, by any path: finalize,
--   complete-in-transaction, rescue, expiry, an operator's cancel, a DELETE) makes the key's
--   oldest pending job the head. It only tries the key's lock: the completer must never wait
--   on an application's open transaction. When the lock is taken (an enqueuer of the key is
--   mid-transaction, or the stager works on the key), it writes the key to the wake-up list
--   instead, and the stager promotes after that transaction has ended.
--
-- A retrying head keeps its key (retryable is a head state): a failed job holds its key's
-- successors until it completes, is cancelled or is discarded; then the next one runs.
--
-- job.ordering_wake: keys whose pending jobs may have no head, written by the release trigger
-- when it could not take the key's lock, and by the admit trigger when it makes a row pending
-- (an enqueuer under REPEATABLE READ may see a head that has since finished); read by the
-- stager (job.ordering_wake_up, called from stage.sql), which promotes a headless key's oldest
-- pending job and forgets the key. No primary key: a writer never waits on another's
-- uncommitted row of the same key, at the price of an occasional duplicate, which the stager
-- forgets with the rest.

ALTER TABLE job.jobs ADD COLUMN ordering_key text;

-- On the column's own value: true while NULL, so free for unkeyed rows. NOT VALID: every
-- existing row holds NULL, so the table is not scanned under its lock.
ALTER TABLE job.jobs ADD CONSTRAINT jobs_ordering_key_check
    CHECK (ordering_key IS NULL OR octet_length(ordering_key) BETWEEN 1 AND 512) NOT VALID;

CREATE UNIQUE INDEX jobs_ordering_head_idx ON job.jobs (ordering_key)
    WHERE ordering_key IS NOT NULL
      AND state IN ('scheduled', 'available', 'running', 'retryable');

CREATE INDEX jobs_ordering_pending_idx ON job.jobs (ordering_key, id)
    WHERE state = 'pending';

CREATE TABLE job.ordering_wake (
    ordering_key text NOT NULL
);

CREATE INDEX ordering_wake_key_idx ON job.ordering_wake (ordering_key);

-- Puts `key` on the wake-up list. `always`: even when this snapshot sees it there, which is
-- what the release trigger needs: when it could not take the key's lock, the stager may be
-- the holder, about to delete the entry it sees. The admit trigger holds the key's lock, so
-- an entry it sees stays until after its commit, and it adds none then.
CREATE FUNCTION job.ordering_wake_later(key text, always boolean) RETURNS void
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO job.ordering_wake (ordering_key)
    SELECT key
    WHERE always
       OR NOT EXISTS (SELECT 1 FROM job.ordering_wake w WHERE w.ordering_key = key)
$$;

-- The key's advisory lock: the same number from every caller. One of 1,024 buckets under a
-- base of the schema's own: every advisory lock takes a slot of the server's shared lock
-- table (max_locks_per_transaction × max_connections, 6,400 by default), so a bulk enqueue of
-- 100,000 distinct keys must not take 100,000 of them; it takes at most 1,024. Two keys in
-- one bucket serialize their enqueuing transactions as one key would, which is all the
-- bucket costs.
CREATE FUNCTION job.ordering_lock_key(ordering_key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (hashtextextended('job.ordering', 0) & ~1023::bigint)
           | (hashtextextended(ordering_key, 0) & 1023::bigint)
$$;

-- Makes the oldest pending job of `key` its head, unless it has one. The caller holds the
-- key's lock. Wakes the promoted job's queue (NOTIFY is delivered at commit). Returns whether
-- a job was promoted.
CREATE FUNCTION job.ordering_promote(key text) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    next record;
BEGIN
    IF EXISTS (SELECT 1 FROM job.jobs h
               WHERE h.ordering_key = key
                 AND h.state IN ('scheduled', 'available', 'running', 'retryable')) THEN
        RETURN false;
    END IF;
    SELECT p.id, p.queue, p.run_at INTO next
    FROM job.jobs p
    WHERE p.ordering_key = key AND p.state = 'pending'
    ORDER BY p.id
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- A pending row is written only under the key's lock, which the caller holds, or by an
    -- operator's cancel or purge; the guard skips a row that one of those just finished.
    UPDATE job.jobs
    SET state = CASE WHEN next.run_at > now() THEN 'scheduled' ELSE 'available' END::job.job_state
    WHERE id = next.id AND state = 'pending';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF next.run_at <= now() THEN
        PERFORM pg_notify('job_insert', next.queue);
    END IF;
    RETURN true;
END
$$;

-- BEFORE INSERT, or BEFORE a finished keyed row comes back (redrive): pending when the key
-- has another unfinished job.
CREATE FUNCTION job.ordering_admit() RETURNS trigger
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
        PERFORM job.ordering_wake_later(NEW.ordering_key, false);
    END IF;
    RETURN NEW;
END
$$;

-- AFTER a head finishes or is deleted: promotes the key's next job, if the key's lock is free.
CREATE FUNCTION job.ordering_release() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_try_advisory_xact_lock(job.ordering_lock_key(OLD.ordering_key)) THEN
        PERFORM job.ordering_promote(OLD.ordering_key);
    ELSE
        PERFORM job.ordering_wake_later(OLD.ordering_key, true);
    END IF;
    RETURN NULL;
END
$$;

-- Each WHEN is evaluated per row without calling a function: an unkeyed row costs a NULL test.
CREATE TRIGGER jobs_ordering_admit_insert
    BEFORE INSERT ON job.jobs
    FOR EACH ROW WHEN (NEW.ordering_key IS NOT NULL)
    EXECUTE FUNCTION job.ordering_admit();

-- A finished row brought back (redrive), or an unfinished row given a key
-- (job.set_ordering_key).
CREATE TRIGGER jobs_ordering_admit_update
    BEFORE UPDATE OF state, ordering_key ON job.jobs
    FOR EACH ROW WHEN (NEW.ordering_key IS NOT NULL
                       AND NEW.state NOT IN ('completed', 'cancelled', 'discarded')
                       AND (OLD.state IN ('completed', 'cancelled', 'discarded')
                            OR OLD.ordering_key IS DISTINCT FROM NEW.ordering_key))
    EXECUTE FUNCTION job.ordering_admit();

CREATE TRIGGER jobs_ordering_release_finished
    AFTER UPDATE OF state ON job.jobs
    FOR EACH ROW WHEN (OLD.ordering_key IS NOT NULL
                       AND OLD.state IN ('scheduled', 'available', 'running', 'retryable')
                       AND NEW.state IN ('completed', 'cancelled', 'discarded'))
    EXECUTE FUNCTION job.ordering_release();

CREATE TRIGGER jobs_ordering_release_deleted
    AFTER DELETE ON job.jobs
    FOR EACH ROW WHEN (OLD.ordering_key IS NOT NULL
                       AND OLD.state IN ('scheduled', 'available', 'running', 'retryable'))
    EXECUTE FUNCTION job.ordering_release();

-- `job.set_ordering_key(id, key)`: gives the job that job.enqueue_unique inserted its ordering
-- key (sql/enqueue_unique.sql); a function, because it runs after enqueue_unique within one
-- statement and must see that function's row. The admit trigger makes it pending when the key
-- is taken.
CREATE FUNCTION job.set_ordering_key(job_id bigint, key text) RETURNS boolean
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog
AS $$
    UPDATE job.jobs SET ordering_key = key WHERE id = job_id RETURNING true
$$;

-- The stager's pass over the wake-up list: up to `max_keys` keys, each promoted if headless
-- and forgotten, skipping keys whose lock another transaction holds (their enqueuer has not
-- committed: the next pass sees them). Returns how many jobs it promoted.
CREATE FUNCTION job.ordering_wake_up(max_keys integer) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    key text;
    promoted integer := 0;
BEGIN
    FOR key IN
        SELECT DISTINCT w.ordering_key FROM job.ordering_wake w
        ORDER BY w.ordering_key
        LIMIT max_keys
    LOOP
        IF pg_try_advisory_xact_lock(job.ordering_lock_key(key)) THEN
            -- Forget the key first, then promote: an entry a release commits after this
            -- DELETE's snapshot stays for the next pass, and one it committed before is
            -- deleted here, but then the promotion's later snapshot sees that head finished.
            DELETE FROM job.ordering_wake w WHERE w.ordering_key = key;
            IF job.ordering_promote(key) THEN
                promoted := promoted + 1;
            END IF;
        END IF;
    END LOOP;
    RETURN promoted;
END
$$;

-- As every function of the schema: no EXECUTE for PUBLIC. The workers' role needs it on
-- job.ordering_wake_up and job.set_ordering_key (the README's grants); the triggers run as the schema's owner.
REVOKE ALL ON FUNCTION job.ordering_lock_key(text), job.ordering_promote(text),
    job.ordering_wake_later(text, boolean), job.ordering_wake_up(integer), job.ordering_admit(),
    job.ordering_release(), job.set_ordering_key(bigint, text) FROM PUBLIC;
