-- 0002 lifecycle: unique jobs, metadata (tags, tenant), deadlines, pauses. Append-only.

-- How long a job's unique key holds (null when the job has no key):
--   'finished' while scheduled, available, running or retryable;
--   'started'  while scheduled, available or retryable, until its first claim: the claim
--              turns it into 'spent', so a started job never takes its key back (a retry,
--              snooze or release of it cannot collide with the newer job its start let in);
--   'spent'    a 'started' job that has started: holds nothing;
--   'pruned'   in every state, until the row is deleted (periodic jobs: a period that already
--              ran never fires again, whichever worker's scheduler comes late).
ALTER TABLE job.jobs
    ADD COLUMN unique_scope text,
    ADD COLUMN tags         text[] NOT NULL DEFAULT '{}',
    ADD COLUMN tenant       text,
    ADD CONSTRAINT jobs_unique_scope_check CHECK (
        (unique_key IS NULL) = (unique_scope IS NULL)
        AND unique_scope IN ('finished', 'started', 'spent', 'pruned')
    ),
    ADD CONSTRAINT jobs_unique_key_check CHECK (octet_length(unique_key) BETWEEN 1 AND 512),
    ADD CONSTRAINT jobs_tenant_check CHECK (octet_length(tenant) BETWEEN 1 AND 128);

-- The one guard of unique jobs: a duplicate insert fails here, or is turned into a
-- `ON CONFLICT (kind, unique_key) WHERE <this predicate>` by the enqueue. Every statement that
-- infers this index must repeat the predicate exactly (see sql/enqueue_unique.sql).
CREATE UNIQUE INDEX jobs_unique_idx ON job.jobs (kind, unique_key)
    WHERE unique_key IS NOT NULL AND (
        unique_scope = 'pruned'
        OR (unique_scope = 'finished'
            AND state IN ('scheduled', 'available', 'running', 'retryable'))
        OR (unique_scope = 'started'
            AND state IN ('scheduled', 'available', 'retryable'))
    );

-- The deadline pass: waiting jobs that have a deadline.
CREATE INDEX jobs_deadline_idx ON job.jobs (deadline)
    WHERE deadline IS NOT NULL AND state IN ('available', 'scheduled', 'retryable');

-- Dead letters by time, for listing, redriving and purging.
CREATE INDEX jobs_discarded_idx ON job.jobs (finalized_at, id)
    WHERE state = 'discarded';

-- Paused queues and kinds: the claim takes nothing that matches a row here. Small by nature.
CREATE TABLE job.pauses (
    scope     text        NOT NULL CHECK (scope IN ('queue', 'kind')),
    name      text        NOT NULL CHECK (octet_length(name) BETWEEN 1 AND 128),
    paused_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, name)
);

-- Inserts one job with a unique key, deciding duplicates by jobs_unique_idx and never by a
-- pre-check. Returns the job's id and what happened: 'inserted'; 'replaced' (the waiting
-- duplicate's payload, run time and deadline were overwritten: `replace`, and never a running
-- one); or 'duplicate' (the existing job's id, left alone). A function, so that the fallback
-- read of the existing row is a statement of its own with a fresh snapshot: a duplicate
-- committed by a concurrent enqueue while this one waited on the index is visible to it.
CREATE FUNCTION job.enqueue_unique(
    p_kind            text,
    p_queue           text,
    p_priority        smallint,
    p_payload         jsonb,
    p_payload_version integer,
    p_max_attempts    integer,
    p_run_at          timestamptz,
    p_deadline        timestamptz,
    p_unique_key      text,
    p_unique_scope    text,
    p_replace         boolean,
    p_tags            text[],
    p_tenant          text,
    OUT id            bigint,
    OUT outcome       text
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_state job.job_state := CASE WHEN p_run_at > now() THEN 'scheduled' ELSE 'available' END;
BEGIN
    FOR i IN 1..100 LOOP
        IF p_replace THEN
            INSERT INTO job.jobs AS j (kind, queue, priority, payload, payload_version,
                                       max_attempts, run_at, state, deadline, unique_key,
                                       unique_scope, tags, tenant)
            VALUES (p_kind, p_queue, p_priority, p_payload, p_payload_version, p_max_attempts,
                    p_run_at, v_state, p_deadline, p_unique_key, p_unique_scope, p_tags,
                    p_tenant)
            ON CONFLICT (kind, unique_key)
                WHERE unique_key IS NOT NULL AND (
                    unique_scope = 'pruned'
                    OR (unique_scope = 'finished'
                        AND state IN ('scheduled', 'available', 'running', 'retryable'))
                    OR (unique_scope = 'started'
                        AND state IN ('scheduled', 'available', 'retryable')))
            DO UPDATE SET payload         = excluded.payload,
                          payload_version = excluded.payload_version,
                          run_at          = excluded.run_at,
                          deadline        = excluded.deadline,
                          state           = CASE WHEN j.state = 'retryable' THEN j.state
                                                 ELSE excluded.state END
                -- Only a waiting row is replaced: the lock taken by ON CONFLICT makes this
                -- test see a claim that moved the row to running an instant ago.
                WHERE j.state IN ('scheduled', 'available', 'retryable')
            RETURNING j.id, CASE WHEN j.xmax = 0 THEN 'inserted' ELSE 'replaced' END
            INTO enqueue_unique.id, enqueue_unique.outcome;
        ELSE
            INSERT INTO job.jobs (kind, queue, priority, payload, payload_version,
                                  max_attempts, run_at, state, deadline, unique_key,
                                  unique_scope, tags, tenant)
            VALUES (p_kind, p_queue, p_priority, p_payload, p_payload_version, p_max_attempts,
                    p_run_at, v_state, p_deadline, p_unique_key, p_unique_scope, p_tags,
                    p_tenant)
            ON CONFLICT (kind, unique_key)
                WHERE unique_key IS NOT NULL AND (
                    unique_scope = 'pruned'
                    OR (unique_scope = 'finished'
                        AND state IN ('scheduled', 'available', 'running', 'retryable'))
                    OR (unique_scope = 'started'
                        AND state IN ('scheduled', 'available', 'retryable')))
            DO NOTHING
            RETURNING job.jobs.id, 'inserted' INTO enqueue_unique.id, enqueue_unique.outcome;
        END IF;
        IF enqueue_unique.id IS NOT NULL THEN
            RETURN;
        END IF;
        -- A duplicate holds the key: read it with this statement's fresh snapshot.
        SELECT j.id, 'duplicate' INTO enqueue_unique.id, enqueue_unique.outcome
        FROM job.jobs j
        WHERE j.kind = p_kind AND j.unique_key = p_unique_key AND (
            j.unique_scope = 'pruned'
            OR (j.unique_scope = 'finished'
                AND j.state IN ('scheduled', 'available', 'running', 'retryable'))
            OR (j.unique_scope = 'started'
                AND j.state IN ('scheduled', 'available', 'retryable')));
        IF enqueue_unique.id IS NOT NULL THEN
            RETURN;
        END IF;
        -- The duplicate finished between the insert and the read: try again.
    END LOOP;
    RAISE EXCEPTION 'enqueue of `%` with unique key % kept racing a finishing duplicate',
        p_kind, quote_literal(p_unique_key);
END
$$;

-- The expire pass's other half: waiting jobs whose cancellation was requested while they ran.
CREATE INDEX jobs_cancel_requested_idx ON job.jobs (id)
    WHERE cancel_requested AND state IN ('available', 'scheduled', 'retryable');
