-- 0051 rate_claim_by_version: the rate-limited claim never reads the jobs of a payload version
-- newer than its worker decodes. Append-only: change the schema in a new numbered file.
--
-- Migration 0050 gave job.claim this; the rate-limited claim (claim_rated.sql) still read each
-- key's jobs through jobs_rate_key_idx (queue, kind, rate_key, priority, run_at, id) and its
-- jobs without a key through jobs_claim_idx, comparing payload_version on the table row. So
-- during a rolling deploy every claim of an old worker, under the kind's advisory lock, read
-- each waiting job of the new release's version ahead of what it took (100,000 of them: about
-- 70 ms a claim).
--
-- jobs_rate_key_version_idx puts payload_version after rate_key and replaces
-- jobs_rate_key_idx: the claim's probe for the next key with waiting jobs reads the same
-- leading columns, and per key it finds the versions it decodes (one probe each, from the
-- newest down, as job.claim does) and reads each version's jobs in claim order, at most the
-- key's room. The jobs without a key are looked for among the kind's first 100 jobs the worker
-- could take per version it decodes, through jobs_claim_version_idx, merged in claim order.
--
-- The index holds only the available rows with a key, but building it reads the whole table,
-- in this migration's transaction (CREATE INDEX CONCURRENTLY cannot run in one): writes to
-- job.jobs wait while it builds, so on a large table apply it when the queue is quiet.

CREATE INDEX jobs_rate_key_version_idx
    ON job.jobs (queue, kind, rate_key, payload_version, priority, run_at, id)
    WHERE state = 'available' AND rate_key IS NOT NULL;

DROP INDEX job.jobs_rate_key_idx;
