-- The database's payload limit in bytes (migration 0005), which every insert and every update
-- of a payload obeys.
SELECT payload_limit FROM job_settings WHERE one = 1
