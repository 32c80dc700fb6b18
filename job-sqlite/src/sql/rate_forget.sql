-- Forgets the starts of kind ?1 at or before ?2 (the start of its rate window): they no
-- longer count against its limit; and those after ?3 (now), stamped before the clock stepped
-- back. In the claim's immediate transaction.
DELETE FROM job_rate_starts WHERE kind = ?1 AND (at <= ?2 OR at > ?3)
