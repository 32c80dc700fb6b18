-- Lists every paused queue and kind.
SELECT scope, name FROM job_pauses ORDER BY scope, name
