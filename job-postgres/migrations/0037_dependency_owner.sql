-- 0037 dependency_owner: a dependent's edges go with it. Append-only: change the schema in a
-- new numbered file.
--
-- job.dependencies.job_id had no foreign key: every path of the framework that deletes a job
-- (prune, purge, the stager's clean-up) deletes its edges too, but a raw DELETE of a waiting
-- dependent (an application with the worker role's table privileges) left them. Such edges
-- stayed unflagged and unresolved for good, and being first in the stager's flagging order
-- (by the job waited for), a few thousand of them took every place of its batch: no new edge
-- was flagged again, and the dependents enqueued after were seen only by the stager's sweep,
-- at most once a minute. An edge now goes with its dependent (ON DELETE CASCADE, as job.steps
-- does since migration 0003); the edges such deletes left before are deleted here.
--
-- The edges left before are deleted first, in this transaction: a read of every edge (an
-- anti-join with job.jobs), under row locks only, so claims and heartbeats go on. Then both
-- tables are locked (SHARE ROW EXCLUSIVE, which waits for their writers and holds further
-- writes until this transaction commits) in the order every writer takes them, job.jobs
-- first: an enqueue with dependencies and the stager write a job, then its edges, and the
-- ALTER alone locked the edges first, then waited for job.jobs, a deadlock with either (a
-- redrive, whose statement locks the edges first, takes job.jobs before it: the store's
-- redrive_lock.sql). The
-- constraint is NOT VALID: added under those locks without a scan, it is enforced on every
-- edge written from now on, and its cascade applies to every edge, old or new (an orphan
-- written between the DELETE and the lock stays, harmless). The edges pointing at a job
-- (depends_on) keep no key: they outlive a job waited for that is pruned or purged, which
-- redrive and the stager read (migration 0031).

DELETE FROM job.dependencies d
WHERE NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.id = d.job_id);

LOCK TABLE job.jobs, job.dependencies IN SHARE ROW EXCLUSIVE MODE;

ALTER TABLE job.dependencies
    ADD CONSTRAINT dependencies_job_id_fkey FOREIGN KEY (job_id)
    REFERENCES job.jobs (id) ON DELETE CASCADE NOT VALID;
