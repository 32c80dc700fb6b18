-- 0019 claim by kind: a claim reads only the due rows of the kinds it takes, as PostgreSQL's
-- jobs_claim_idx (migration 0008) lets job.claim do. Append-only: change the schema in a new
-- numbered file.
--
-- job_jobs_claim_idx was (queue, priority, run_at, id), and the claim filtered the kind of
-- each row it read (a join with the requested kinds). So every due row of a kind it would not
-- take was read on every claim, idle polls included, under the file's one write lock: a
-- paused or breaker-tripped kind, a kind at its concurrency cap or out of rate, a kind no
-- worker of the process runs (300,000 due rows of a paused kind and one job of the claimed
-- kind: 190-250 ms a claim). The claim now picks each kind it takes apart (sql/claim_pick.sql,
-- one seek per distinct priority of the kind, then a range per priority up to now) and merges
-- the picks in Rust in the claim's order. The old index has no other reader that needs its
-- order (stats_oldest.sql reads the waiting rows whole, which this index holds as well), so
-- it goes: a waiting row keeps one claim index entry.
--
-- Building the index reads every waiting row once, inside this migration's transaction,
-- holding the file's write lock.

CREATE INDEX job_jobs_claim_kind_idx ON job_jobs (queue, kind, priority, run_at, id)
    WHERE state IN ('available', 'scheduled', 'retryable');
DROP INDEX job_jobs_claim_idx;
