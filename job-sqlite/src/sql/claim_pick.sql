-- Due waiting jobs of kind ?2 on queue ?1 and of one payload version, in claim order
-- (priority, run time, id), at most ?4; ?3 is the database's now (the claim's, read once for
-- its transaction by now.sql), or NULL for now.sql's reading here (the read before a claim,
-- lease::claimable, one statement fewer). The version is the lowest
-- among the kind's waiting jobs on the queue from ?6 up to ?5 (the newest its worker decodes).
-- After the jobs (`next` null), one row with a null id: its `next` is the next such version
-- up to ?5, null when there is none. Skipped: jobs past their deadline (the pruner discards
-- them) and jobs whose cancellation was requested (the pruner cancels them), and rows whose
-- next attempt or counts a worker could not hold (written raw before migration 0006, or at
-- `attempt` 2147483646). Runs inside the claim's immediate transaction, once per kind the
-- claim takes and per version of it (?6 is 1, then each `next`; lease.rs merges the picks in
-- the same order): no other writer can take these rows before claim_take.sql does.
--
-- Its cost grows neither with the jobs scheduled later, nor with other kinds' jobs, nor with
-- jobs of a version newer than ?5. job_jobs_claim_version_idx is (queue, kind,
-- payload_version, priority, run_at, id) over the waiting rows (migration 0020): the rows of a
-- kind this claim does not take (paused, at its cap, run by no worker of the process) and of a
-- version its worker cannot decode are never read. Read in the claim's order from `queue = ?1
-- AND kind = ?2` alone, a claim that found fewer due jobs than it asked for (every idle poll)
-- would walk every waiting row of the kind under the write lock (300,000 scheduled for later:
-- 20 ms a claim; 1,000,000: 80 ms). Reading the kind in the claim's order and filtering the
-- version on each row, as before migration 0020, walked every due job of a newer version: an
-- old worker's claims during a rolling deploy (100,000 due jobs of version 2, a worker that
-- decodes 1: 600,000 SQLite instructions and 30 ms a claim in the dev profile, idle polls
-- included; now 113 instructions and 0.09 ms).
--
-- So the version is found first (`version`, one seek), then its distinct priorities, each one
-- seek on the index (`priorities`, the skip-scan that SQLite plans only with ANALYZE's
-- statistics, written out), and the rows read with that version, `priority` IN those and
-- `run_at <= ?3`: a range of the index per priority, still in the claim's order (the IN list
-- is read in ascending order), so it stops after ?4 rows and never reads a row due later; the
-- next version is one more seek. Jobs of two versions interleave in the claim's order, which
-- no one range of the index gives, so each version is picked apart and lease.rs merges them,
-- as it merges kinds (one statement a version: versions are few, a deploy's old and new). A
-- first statement finding the versions would cost every claim one statement more; found here,
-- an ordinary claim (one version) still runs one statement per kind, for two seeks and a
-- co-routine more (a claim of 10 due jobs: 4,465 SQLite instructions, 4,287 before; of 100:
-- 41,905, 41,097; an idle poll over 20,000 jobs due later: 248, 140). Answering `next` on
-- every row of a LEFT JOIN from one row instead materialized the picks (4,483; 42,013). The
-- plan is checked by lease.rs's tests, with and without statistics.
WITH RECURSIVE version(v) AS (
    SELECT min(payload_version) FROM job_jobs
    WHERE queue = ?1 AND kind = ?2 AND state IN ('available', 'scheduled', 'retryable')
      AND payload_version >= ?6 AND payload_version <= ?5
),
priorities(priority) AS (
    SELECT min(priority) FROM job_jobs
    WHERE queue = ?1 AND kind = ?2 AND state IN ('available', 'scheduled', 'retryable')
      AND payload_version = (SELECT v FROM version)
    UNION ALL
    SELECT (SELECT min(w.priority) FROM job_jobs w
            WHERE w.queue = ?1 AND w.kind = ?2
              AND w.state IN ('available', 'scheduled', 'retryable')
              AND w.payload_version = (SELECT v FROM version)
              AND w.priority > p.priority)
    FROM priorities p
    WHERE p.priority IS NOT NULL
)
SELECT * FROM (
    SELECT NULL AS next, j.id, j.priority, j.run_at
    FROM job_jobs j
    WHERE j.state IN ('available', 'scheduled', 'retryable')
      AND j.queue = ?1
      AND j.kind = ?2
      AND j.payload_version = (SELECT v FROM version)
      AND j.priority IN (SELECT priority FROM priorities WHERE priority IS NOT NULL)
      AND j.run_at <= coalesce(?3, CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)
      AND (j.deadline IS NULL
           OR j.deadline > coalesce(?3, CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000))
      AND j.cancel_requested = 0
      AND j.attempt < 2147483646
      AND j.max_attempts <= 2147483647
      AND j.snoozes <= 2147483647
    ORDER BY j.priority, j.run_at, j.id
    LIMIT ?4
)
UNION ALL
SELECT (SELECT min(n.payload_version) FROM job_jobs n
        WHERE n.queue = ?1 AND n.kind = ?2
          AND n.state IN ('available', 'scheduled', 'retryable')
          AND n.payload_version > (SELECT v FROM version)
          AND n.payload_version <= ?5), NULL, NULL, NULL
