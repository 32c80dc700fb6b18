-- Turns JIT compilation off for the rest of the transaction. The operator reads whose plans
-- cost more than `jit_above_cost` (inspect_overview.sql, check_counts.sql) would otherwise
-- spend half a second compiling a query that runs in a tenth of that.
SET LOCAL jit = off
