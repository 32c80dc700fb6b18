-- Of the items (ids $1, tokens $2, in lockstep) that finalize.sql did not apply, the
-- ordinalities of those whose row still holds the token: the lease is still the worker's, and
-- the row was skipped because another transaction held it. Read only when finalize.sql applied
-- fewer items than it was given.
SELECT u.ord
FROM unnest($1::bigint[], $2::uuid[]) WITH ORDINALITY AS u(id, token, ord)
JOIN job.jobs j ON j.id = u.id AND j.lock_token = u.token
