-- Leases, from the rescue index (rows with a lease only): held at all, expired (the row runs
-- without a live lease: the rescuer's to take), expired for longer than $1 milliseconds (one
-- lease: no rescuer is taking them), reported stuck, and held by a row that is not running
-- (which jobs_lease_check forbids). Also the oldest expiry.
SELECT count(*) AS held,
       count(*) FILTER (WHERE j.locked_until < now()) AS expired,
       count(*) FILTER (WHERE j.locked_until < now() - make_interval(secs => $1::double precision / 1000)) AS overdue,
       count(*) FILTER (WHERE j.stuck_since IS NOT NULL) AS stuck,
       count(*) FILTER (WHERE j.state <> 'running') AS not_running,
       min(j.locked_until) AS oldest_expiry
FROM job.jobs j
WHERE j.locked_until IS NOT NULL
