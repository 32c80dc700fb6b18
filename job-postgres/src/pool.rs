//! Pools whose connections are never handed out inside a transaction.
//!
//! sqlx (0.8.4 up to at least 0.9.0, upstream issues 4385 and 4393) sends `BEGIN` and only
//! then records that the connection is in a transaction. A `begin()` future dropped in
//! between (a handler aborted by its timeout or a lost lease, a `select!`, a
//! `tokio::time::timeout`) leaves the connection inside an open transaction that sqlx does not
//! know of, and the pool gives it to the next borrower: that borrower's writes then run inside
//! the stale transaction and are never committed (or are rolled back when the connection
//! closes). The worker aborts handlers, so it would expose every application to this.
//!
//! [`pool_options`] builds pools that check each connection as it is given back: one still
//! inside a transaction is closed (the server rolls the stale transaction back) instead of
//! being reused. The check is one small statement per release; sqlx offers no way to read
//! the transaction status it already has, so a statement is the only way to ask.

use sqlx::postgres::{PgConnection, PgPoolOptions};
use sqlx::{Executor, Row};

use crate::sql;

/// Pool options for the application's pool and the worker's own: a connection given back
/// inside a transaction sqlx does not know of (a cancelled `begin()`) is closed, never
/// reused. Set the pool's size and timeouts on the result as usual.
///
/// ```no_run
/// # async fn demo() -> Result<(), sqlx::Error> {
/// let pool = job_postgres::pool_options()
///     .max_connections(20)
///     .connect("postgres://postgres@127.0.0.1/app")
///     .await?;
/// # Ok(()) }
/// ```
pub fn pool_options() -> PgPoolOptions {
    PgPoolOptions::new().after_release(|conn, _meta| {
        Box::pin(async move {
            let in_transaction = in_transaction(conn).await?;
            if in_transaction {
                // Closing it ends the session, and the server rolls the transaction back.
                tracing::warn!(
                    "a connection was given back inside a transaction (a cancelled begin()): \
                     closing it instead of reusing it"
                );
            }
            Ok(!in_transaction)
        })
    })
}

/// Whether `conn` is inside an open transaction block. Asked through the simple protocol: one
/// message, so that a statement opening its own transaction starts it at its own timestamp
/// (see the statement's comment).
async fn in_transaction(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let row = conn
        .fetch_one(sqlx::raw_sql(sql::POOL_IN_TRANSACTION))
        .await?;
    row.try_get(0)
}
