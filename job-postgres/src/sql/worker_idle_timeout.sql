-- Ends a session of one of the worker's own connections (Store::dedicated) that stays idle
-- inside a transaction for 30 s. The worker's transactions send their statements back to back
-- (the rate-limited claim, the renewal of a waiting job): one idle that long belongs to a
-- worker that stopped (SIGSTOP, a frozen VM) or whose connection went silent, and it holds
-- advisory locks every claim of its kinds waits for, or a job row no one else can renew,
-- finalize or rescue. Handlers never use these connections.
SET idle_in_transaction_session_timeout = '30s'
