-- The room each rate-limited kind has now ($1 kinds, $2 limits, $3 periods in milliseconds,
-- in lockstep): its limit less its starts in the window that ends now (job.rate_windows,
-- migration 0015). The caller holds these kinds' advisory locks (claim_lock.sql), taken in an
-- earlier statement, and the window ends at clock_timestamp(), read after the locks were
-- granted: every earlier claim of the kinds has committed its starts.
SELECT k.kind,
       greatest(0, k.lim - coalesce((
           SELECT count(*)
           FROM unnest(w.starts) AS s(at)
           WHERE s.at > clock_timestamp() - k.per_ms * interval '1 millisecond'
       ), 0))::integer AS room
FROM unnest($1::text[], $2::integer[], $3::bigint[]) AS k(kind, lim, per_ms)
LEFT JOIN job.rate_windows w ON w.kind = k.kind
