-- What a cancel needs of job ?1: its state, attempt and error history.
SELECT state, attempt, errors FROM job_jobs WHERE id = ?1
