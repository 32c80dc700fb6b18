-- Adds ended attempts to the kinds' circuit breakers and returns those it tripped
-- (job.breaker_record, migration 0015): $1 kinds, $2 attempts, $3 failures, then each
-- breaker's failure percent, minimum attempts, window and cool-down in milliseconds.
SELECT kind, reason, resume_at
FROM job.breaker_record($1::text[], $2::bigint[], $3::bigint[], $4::smallint[],
                        $5::integer[], $6::bigint[], $7::bigint[])
