-- 0028 legacy rows: the rows stored before migration 0022 that its checks (added NOT VALID, so
-- that old rows were not scanned) refuse are repaired, keeping their meaning. NOT VALID skips
-- only the check of the rows already there: every UPDATE of such a row is checked, and the
-- claim and the heartbeat update the rows they take. So one such row stopped every claim of its
-- queue (it was picked, and the claim failed) or every heartbeat batch it was in. The case a
-- door let in: `job.enqueue(..., tags => '[5:5]={a}')`, an array not indexed from 1, accepted
-- until 0022; the others needed raw writes. Append-only: change the schema in a new file.
--
-- One pass over the table, changing only the rows that break a rule:
-- - tags indexed from 1, the same tags in the same order;
-- - `attempt` and `snoozes` at most 2,147,483,646, and a running row's `attempt` at least 1;
-- - a `locked_by` over 128 bytes cleared (it only names the holder; the token holds the lease);
-- - `progress_at` and `stuck_since` outside 0001-9999 cleared (both are optional).
-- The admission trigger is off for the pass: it checks the tags' names, which this pass does not
-- change, and a name refused since must not stop the repair of the index.

ALTER TABLE job.jobs DISABLE TRIGGER jobs_admission;

UPDATE job.jobs SET
    tags        = CASE WHEN cardinality(tags) > 0 AND array_lower(tags, 1) <> 1
                       THEN ARRAY(SELECT unnest(tags)) ELSE tags END,
    attempt     = CASE WHEN attempt > 2147483646 THEN 2147483646
                       WHEN state = 'running' AND attempt < 1 THEN 1
                       ELSE attempt END,
    snoozes     = least(snoozes, 2147483646),
    locked_by   = CASE WHEN octet_length(locked_by) > 128 THEN NULL ELSE locked_by END,
    progress_at = CASE WHEN progress_at < '0001-01-01 00:00:00+00'
                         OR progress_at >= '10000-01-01 00:00:00+00'
                       THEN NULL ELSE progress_at END,
    stuck_since = CASE WHEN stuck_since < '0001-01-01 00:00:00+00'
                         OR stuck_since >= '10000-01-01 00:00:00+00'
                       THEN NULL ELSE stuck_since END
WHERE (cardinality(tags) > 0 AND array_lower(tags, 1) <> 1)
   OR attempt > 2147483646
   OR (state = 'running' AND attempt < 1)
   OR snoozes > 2147483646
   OR octet_length(locked_by) > 128
   OR progress_at < '0001-01-01 00:00:00+00' OR progress_at >= '10000-01-01 00:00:00+00'
   OR stuck_since < '0001-01-01 00:00:00+00' OR stuck_since >= '10000-01-01 00:00:00+00';

ALTER TABLE job.jobs ENABLE TRIGGER jobs_admission;
