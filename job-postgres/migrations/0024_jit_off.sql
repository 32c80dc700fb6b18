-- 0024 no JIT compilation of the claim and the stager's functions.
-- Append-only: change the schema in a new numbered file.
--
-- PostgreSQL compiles a statement with LLVM when its plan's estimated cost exceeds
-- jit_above_cost (100,000 by default, and JIT is on by default). job.claim's statement is
-- planned once per connection as a generic plan (migration 0021), whose estimate includes the
-- count of a limited kind's running rows as a scan of the whole table even when no kind is
-- limited: with 300,000 running, 300,000 scheduled and 300,000 completed rows, that estimate
-- passed the threshold and every claim of 10 jobs spent 35 ms compiling (auto_explain: "JIT:
-- Functions: 69 ... Total 35.714 ms"), 39-65 ms a claim against under 1 ms without. A claim,
-- a stage pass and their functions are short statements that never gain from compiling. The
-- worker's own connections are opened with JIT off as well (job_postgres::Store::dedicated),
-- which covers its plain statements (stage, rescue, finalize, ...); this covers the functions
-- whoever calls them.

ALTER FUNCTION job.claim(text, text[], integer[], bigint[], integer, text, integer[], text[])
    SET jit = off;
ALTER FUNCTION job.dependencies_resolve(integer) SET jit = off;
ALTER FUNCTION job.ordering_wake_up(integer) SET jit = off;
ALTER FUNCTION job.ordering_promote(text) SET jit = off;
