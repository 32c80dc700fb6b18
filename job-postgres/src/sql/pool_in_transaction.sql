-- Whether the session is inside an open transaction block, asked of a connection given back to
-- a pool (see pool.rs), through the simple query protocol. A statement sent as one simple query
-- outside a transaction block starts its own transaction with transaction_timestamp() equal to
-- its statement_timestamp(); inside a block opened earlier the two differ. (With the extended
-- protocol they differ anyway: the transaction starts at Parse, the statement at Execute.)
SELECT statement_timestamp() <> transaction_timestamp()
