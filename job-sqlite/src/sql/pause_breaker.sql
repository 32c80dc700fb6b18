-- Pauses kind ?1 at ?2 for its tripped breaker, with reason ?3, until ?4, unless an operator
-- paused it (that pause stays) or a breaker's pause is still in force. Changes a row when
-- the kind was paused by this trip.
INSERT INTO job_pauses (scope, name, paused_at, paused_by, reason, resume_at)
VALUES ('kind', ?1, ?2, 'breaker', ?3, ?4)
ON CONFLICT (scope, name) DO UPDATE
SET paused_at = excluded.paused_at, paused_by = 'breaker', reason = excluded.reason,
    resume_at = excluded.resume_at
WHERE job_pauses.resume_at IS NOT NULL AND job_pauses.resume_at <= ?2
