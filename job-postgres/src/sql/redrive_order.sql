-- After redrive.sql, in its transaction (which holds the keys' locks it took): a key with no
-- head when it was redriven got as its head whichever of its redriven dead letters the UPDATE
-- happened to write first (the admit trigger of migration 0012 makes the first the head, the
-- rest pending), which is the plan's order (by when they were discarded), not enqueue order.
-- A redriven head ($1: the ids redriven) with a job of its key pending behind it that has a
-- lower id and waits for no dependency goes back to pending; the release trigger then promotes
-- the key's lowest pending job (job.ordering_promote), so a key's jobs run in id order again.
-- No worker can have claimed such a head: its row is this transaction's until it commits.
UPDATE job.jobs h
SET state = 'pending'
WHERE h.id = ANY ($1::bigint[])
  AND h.ordering_key IS NOT NULL
  AND h.state IN ('available', 'scheduled')
  AND EXISTS (SELECT 1 FROM job.jobs p
              WHERE p.ordering_key = h.ordering_key AND p.state = 'pending' AND p.id < h.id
                AND NOT EXISTS (SELECT 1 FROM job.dependencies d
                                WHERE d.job_id = p.id AND NOT d.resolved))
