-- 0030 a rate key at its limit costs its claim nothing. Append-only: change the schema in a new
-- numbered file.
--
-- A claim of a rate-limited kind (claim_rated.sql) counted, for every key it looked at, the
-- key's starts in the window by reading its whole `starts` array, also when the key was at its
-- limit and gave nothing: 256 keys with 10,000 starts each made every claim of the kind read
-- 2.56 million timestamps (about 0.3 s, under the kind's advisory lock, so every claim of the
-- kind in the cluster waited for it), to claim nothing.
--
-- The claim that writes a key's window now also writes the N-th newest start it keeps
-- (`limit_start`) and that N (`limit_starts`, the kind's limit then). A key holds N starts in a
-- window ending now exactly when its N-th newest start is inside the window, and no start is
-- added but by such a write (claims of the kind run one at a time under its lock), so a later
-- claim with the same limit knows the key is at its limit from these two columns, without
-- reading the array. Otherwise (the start has left the window, the key has fewer than N starts,
-- or the limit changed in a deploy) it counts as before. Rows written before this migration
-- have nulls and are counted until their next write.
ALTER TABLE job.rate_windows
    ADD COLUMN limit_starts integer,
    ADD COLUMN limit_start timestamptz;

-- NOT VALID: every existing row has nulls, which pass; new writes are checked.
ALTER TABLE job.rate_windows ADD CONSTRAINT rate_windows_limit_check
    CHECK ((limit_starts IS NULL) = (limit_start IS NULL)
           AND (limit_starts IS NULL OR limit_starts >= 1)) NOT VALID;
