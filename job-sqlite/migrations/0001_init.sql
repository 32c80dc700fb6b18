-- 0001 init: the job table, pauses, steps. The same row as job-postgres's `job.jobs`, in
-- SQLite's types: times are INTEGER microseconds since the Unix epoch (UTC), JSON is TEXT
-- (checked by json_valid), booleans are 0/1, the lease token is a 16-byte BLOB. Tables are
-- prefixed `job_` so they can share a file with the application's own tables (which is what
-- makes an enqueue part of the application's transaction). Append-only: change the schema in
-- a new numbered file.

CREATE TABLE job_jobs (
    -- AUTOINCREMENT: an id is never reused, even after its row is pruned.
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    kind             TEXT    NOT NULL CHECK (length(CAST(kind AS BLOB)) BETWEEN 1 AND 128),
    queue            TEXT    NOT NULL CHECK (length(CAST(queue AS BLOB)) BETWEEN 1 AND 128),
    priority         INTEGER NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 32767),
    payload          TEXT    NOT NULL CHECK (json_valid(payload) AND json_type(payload) = 'object'),
    payload_version  INTEGER NOT NULL DEFAULT 1 CHECK (payload_version >= 1),
    attempt          INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     INTEGER NOT NULL DEFAULT 25 CHECK (max_attempts >= 1),
    snoozes          INTEGER NOT NULL DEFAULT 0 CHECK (snoozes >= 0),
    run_at           INTEGER NOT NULL,
    deadline         INTEGER,
    state            TEXT    NOT NULL CHECK (state IN ('scheduled', 'available', 'running',
                                                       'retryable', 'completed', 'cancelled',
                                                       'discarded')),
    lock_token       BLOB,
    locked_until     INTEGER,
    locked_by        TEXT,
    stuck_since      INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    -- attempt history, oldest first: [{attempt, at, class, message}, ...]
    errors           TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(errors) AND json_type(errors) = 'array'),
    unique_key       TEXT    CHECK (length(CAST(unique_key AS BLOB)) BETWEEN 1 AND 512),
    -- 'finished' | 'started' | 'spent' | 'pruned', as in job-postgres's migration 0002
    unique_scope     TEXT,
    tags             TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(tags) AND json_type(tags) = 'array'),
    tenant           TEXT    CHECK (length(CAST(tenant AS BLOB)) BETWEEN 1 AND 128),
    created_at       INTEGER NOT NULL,
    finalized_at     INTEGER,

    -- a lease (token and expiry) exists exactly while running; locked_by and stuck_since only
    -- with a lease
    CONSTRAINT jobs_lease_check CHECK (
        (state = 'running') = (lock_token IS NOT NULL)
        AND (lock_token IS NULL) = (locked_until IS NULL)
        AND (locked_by IS NULL OR lock_token IS NOT NULL)
        AND (stuck_since IS NULL OR lock_token IS NOT NULL)
    ),
    CONSTRAINT jobs_finalized_check CHECK (
        (state IN ('completed', 'cancelled', 'discarded')) = (finalized_at IS NOT NULL)
    ),
    CONSTRAINT jobs_unique_scope_check CHECK (
        (unique_key IS NULL) = (unique_scope IS NULL)
        AND (unique_scope IS NULL OR unique_scope IN ('finished', 'started', 'spent', 'pruned'))
    )
) STRICT;

-- The claim path: only waiting rows, in the claim's order.
CREATE INDEX job_jobs_claim_idx ON job_jobs (queue, priority, run_at, id)
    WHERE state IN ('available', 'scheduled', 'retryable');

-- The rescuer, and running jobs per kind for concurrency limits: only running rows.
CREATE INDEX job_jobs_rescue_idx ON job_jobs (locked_until)
    WHERE locked_until IS NOT NULL;
CREATE INDEX job_jobs_running_kind_idx ON job_jobs (kind)
    WHERE locked_until IS NOT NULL;

-- Pruning finished jobs by age.
CREATE INDEX job_jobs_finalized_idx ON job_jobs (finalized_at)
    WHERE finalized_at IS NOT NULL;

-- The one guard of unique jobs, over each scope's active states (see job-postgres's 0002).
-- Every statement that names it as a conflict target repeats the predicate exactly.
CREATE UNIQUE INDEX job_jobs_unique_idx ON job_jobs (kind, unique_key)
    WHERE unique_key IS NOT NULL AND (
        unique_scope = 'pruned'
        OR (unique_scope = 'finished'
            AND state IN ('scheduled', 'available', 'running', 'retryable'))
        OR (unique_scope = 'started'
            AND state IN ('scheduled', 'available', 'retryable'))
    );

-- The expire pass: waiting jobs with a deadline, and waiting jobs whose cancellation was
-- requested while they ran.
CREATE INDEX job_jobs_deadline_idx ON job_jobs (deadline)
    WHERE deadline IS NOT NULL AND state IN ('available', 'scheduled', 'retryable');
CREATE INDEX job_jobs_cancel_requested_idx ON job_jobs (id)
    WHERE cancel_requested = 1 AND state IN ('available', 'scheduled', 'retryable');

-- Dead letters by id, for listing, redriving and purging.
CREATE INDEX job_jobs_discarded_idx ON job_jobs (id)
    WHERE state = 'discarded';

-- Paused queues and kinds: the claim takes nothing that matches a row here.
CREATE TABLE job_pauses (
    scope     TEXT    NOT NULL CHECK (scope IN ('queue', 'kind')),
    name      TEXT    NOT NULL CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 128),
    paused_at INTEGER NOT NULL,
    PRIMARY KEY (scope, name)
) STRICT;

-- Durable step outputs, one per job and step name, written under the attempt's lease; a row
-- goes with its job.
CREATE TABLE job_steps (
    job_id      INTEGER NOT NULL REFERENCES job_jobs (id) ON DELETE CASCADE,
    name        TEXT    NOT NULL CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 128),
    output      TEXT    NOT NULL CHECK (json_valid(output)),
    attempt     INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, name)
) STRICT;
