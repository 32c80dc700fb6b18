-- Leaves the payload of job ?1 (of kind ?2) out of the compensating job its discard just
-- inserted (`payload_omitted: true`, as job_jobs_compensate does for a payload over the
-- limit): used when that payload is not UTF-8, which the trigger cannot see and which would
-- make the compensating job unreadable in turn.
UPDATE job_jobs
SET payload = json_set(payload, '$.discarded.payload', NULL,
                       '$.discarded.payload_omitted', json('true'))
WHERE state = 'available'
  AND kind IN (SELECT compensate_kind FROM job_compensations WHERE kind = ?2)
  AND json_valid(payload)
  AND payload ->> '$.discarded.job_id' = ?1
