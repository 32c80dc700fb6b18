-- Records the owner of each kind a worker runs ($1 kinds, $2 owners, in lockstep), writing
-- only what changed.
INSERT INTO job.kind_owners AS o (kind, owner)
SELECT * FROM unnest($1::text[], $2::text[])
ON CONFLICT (kind) DO UPDATE SET owner = excluded.owner, updated_at = now()
WHERE o.owner IS DISTINCT FROM excluded.owner
