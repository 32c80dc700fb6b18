-- Job ?1's payload as its bytes, which may not be UTF-8 (a raw write).
SELECT CAST(payload AS BLOB) FROM job_jobs WHERE id = ?1
