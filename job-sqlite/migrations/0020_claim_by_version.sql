-- 0020 claim by version: a claim reads no waiting row of a payload version newer than its
-- worker decodes. Append-only: change the schema in a new numbered file.
--
-- job_jobs_claim_kind_idx (migration 0019) was (queue, kind, priority, run_at, id), and the
-- claim filtered `payload_version <= ?` on each row it read. During a rolling deploy, new code
-- enqueues jobs of version 2 while the old workers (which decode only version 1) still poll:
-- every claim of an old worker read every due row of version 2 of its kind, idle polls
-- included, under the file's one write lock (100,000 due rows of version 2 and 5 of version
-- 1: 600,000 SQLite instructions a claim, 30 ms in the dev profile, taking nothing once the 5
-- were claimed). With payload_version after kind, each version of a kind has its own range:
-- the claim picks each version it decodes apart (sql/claim_pick.sql, one seek to find the
-- version, one per distinct priority of it, then a range per priority up to now) and merges
-- the picks in Rust in the claim's order, as it merges kinds. The old index has no other
-- reader that needs its order (stats_oldest.sql reads the waiting rows whole, which this index
-- holds as well), so it goes: a waiting row keeps one claim index entry.
--
-- Building the index reads every waiting row once, inside this migration's transaction,
-- holding the file's write lock.

CREATE INDEX job_jobs_claim_version_idx
    ON job_jobs (queue, kind, payload_version, priority, run_at, id)
    WHERE state IN ('available', 'scheduled', 'retryable');
DROP INDEX job_jobs_claim_kind_idx;
