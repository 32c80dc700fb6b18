-- The reporter's transaction: no JIT (report.sql is planned above `jit_above_cost` on a large
-- table and would spend its time compiling) and no parallel workers (a count of a million
-- waiting rows ran as a parallel scan in three processes: a gauge read in the background
-- takes one core at most, and the reporter can then measure what it costs).
SELECT set_config('jit', 'off', true), set_config('max_parallel_workers_per_gather', '0', true)
