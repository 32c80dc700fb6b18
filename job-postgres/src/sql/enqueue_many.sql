-- Inserts many jobs in one statement, one array per column (all of one length); run_at and the
-- deadline as in enqueue.sql. Tags come as one JSON array text per job (arrays of arrays must
-- be rectangular in PostgreSQL). Jobs with unique keys are not accepted here. $13: each job's
-- W3C traceparent, or null. $14: each job's ordering key, or null (the jobs_ordering_admit_insert
-- trigger sees the rows inserted before it in this statement: the first of a key is its head;
-- their locks are taken first, in one order, by job.ordering_lock_keys, migration 0016).
-- $15: each job's rate key, or null for a batch without any (a shorter array unnests as null).
-- The unnests sit in the select list, where they advance in lockstep without
-- materializing the rows first (a FROM unnest(...) does), and hand rows to the insert in
-- array order; INSERT never runs in parallel, so identity ids ascend in input order and the
-- caller maps ids to inputs by that. No ORDER BY: on large batches its sort (spilling past
-- work_mem) cost a third of the statement. tests/store_enqueue.rs checks the order.
INSERT INTO job.jobs (kind, queue, priority, payload, payload_version, max_attempts, run_at, state,
                      deadline, tags, tenant, trace_context, ordering_key, rate_key)
SELECT u.kind, u.queue, u.priority, u.payload::jsonb, u.payload_version, u.max_attempts, t.run_at,
       CASE WHEN t.run_at > now() THEN 'scheduled' ELSE 'available' END::job.job_state,
       t.deadline,
       CASE WHEN u.tags IS NULL THEN '{}'::text[]
            ELSE ARRAY(SELECT jsonb_array_elements_text(u.tags::jsonb)) END,
       u.tenant, u.trace_context, u.ordering_key, u.rate_key
FROM (
    SELECT unnest($1::text[]) AS kind,
           unnest($2::text[]) AS queue,
           unnest($3::smallint[]) AS priority,
           unnest($4::text[]) AS payload,
           unnest($5::integer[]) AS payload_version,
           unnest($6::integer[]) AS max_attempts,
           unnest($7::timestamptz[]) AS run_at,
           unnest($8::bigint[]) AS delay_ms,
           unnest($9::timestamptz[]) AS deadline_at,
           unnest($10::bigint[]) AS deadline_ms,
           unnest($11::text[]) AS tags,
           unnest($12::text[]) AS tenant,
           unnest($13::text[]) AS trace_context,
           unnest($14::text[]) AS ordering_key,
           unnest($15::text[]) AS rate_key
) u
CROSS JOIN LATERAL (
    SELECT coalesce(u.run_at, now() + u.delay_ms * interval '1 millisecond') AS run_at,
           coalesce(u.deadline_at, now() + u.deadline_ms * interval '1 millisecond') AS deadline
) t
WHERE (SELECT job.ordering_lock_keys($14::text[])) IS NOT NULL
RETURNING id
