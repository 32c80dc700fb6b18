-- Lists every paused queue and kind.
SELECT scope, name FROM job.pauses ORDER BY scope, name
