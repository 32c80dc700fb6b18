-- Turns JIT compilation off for the rest of the transaction. inspect_overview.sql is planned
-- above `jit_above_cost` on a large table and then spends most of its time compiling: on a
-- million rows 620-940 ms with JIT, 90-145 ms without. check_counts.sql and pauses_tenant.sql
-- run under it too.
SET LOCAL jit = off
