-- Turns JIT compilation off for the session of one of the worker's own connections
-- (Store::dedicated): its statements are short, and never gain from compiling.
SET jit = off
