-- The database's payload limit in bytes (migration 0005), which every insert and every update
-- of a payload obeys: 1 MiB, the default, when the settings row is missing (migration 0013).
SELECT coalesce((SELECT payload_limit FROM job_settings WHERE one = 1), 1048576)
