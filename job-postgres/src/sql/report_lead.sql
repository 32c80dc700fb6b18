-- Takes or keeps the role $1 for holder $2 until now() + $3 milliseconds, unless another
-- holder has it and its time has not run out. Returns a row when $2 holds the role.
INSERT INTO job.leaders AS l (role, holder, until)
VALUES ($1::text, $2::text, now() + $3::bigint * interval '1 millisecond')
ON CONFLICT (role) DO UPDATE SET holder = excluded.holder, until = excluded.until
WHERE l.holder = excluded.holder OR l.until < now()
RETURNING holder
