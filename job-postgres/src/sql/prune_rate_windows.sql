-- Deletes up to $1 rate windows (job.rate_windows, migration 0015) no claim has written for 8
-- days: every start they hold is older than the longest period a rate may have (7 days), so
-- they limit nothing. A key's row is otherwise trimmed only when that key is claimed again,
-- and keys that come and go (one per tenant, say) would pile up. Skips rows a claim holds.
DELETE FROM job.rate_windows
WHERE ctid = ANY (ARRAY(
    SELECT w.ctid
    FROM job.rate_windows w
    WHERE w.updated_at < now() - interval '8 days'
    LIMIT $1::integer
    FOR UPDATE SKIP LOCKED
))
