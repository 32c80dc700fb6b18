-- How many attempts of kind ?1 started after ?2 (the start of its rate window) and not after
-- ?3 (now), for its rate limit. Read inside the claim's immediate transaction, so no other
-- claim counts the same room. A start after now was stamped before the clock stepped back: it
-- is not counted (rate_forget.sql forgets it), rather than hold the kind's room until the
-- clock is past it again.
SELECT count(*) FROM job_rate_starts WHERE kind = ?1 AND at > ?2 AND at <= ?3
