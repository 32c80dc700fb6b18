-- Leaves the payload of discarded job ?1 out of the compensating job its discard just inserted
-- (an id above ?2, the highest id before the discard: a range of the rowid, not a scan), as
-- job_jobs_compensate does for a payload over the limit (`payload_omitted: true`): used when
-- that payload is not UTF-8, which the trigger cannot see and which would make the
-- compensating job unreadable in turn.
UPDATE job_jobs
SET payload = json_set(payload, '$.discarded.payload', NULL,
                       '$.discarded.payload_omitted', json('true'))
WHERE id > ?2
  AND state = 'available'
  AND kind IN (SELECT c.compensate_kind
               FROM job_compensations c JOIN job_jobs d ON d.kind = c.kind
               WHERE d.id = ?1)
  AND json_valid(payload)
  AND payload ->> '$.discarded.job_id' = ?1
