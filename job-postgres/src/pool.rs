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
//!
//! Connections that go silent. A connection whose server host vanished, or whose flow a
//! firewall or NAT dropped, gets no reset: a statement sent on it never answers and never
//! fails (sqlx sets no TCP keepalive; the kernel gives up only after minutes, and never on a
//! socket with nothing unacknowledged). sqlx checks every connection given back with a round
//! trip, and every idle one taken out with another, without a bound: a caller that gave up
//! on such a connection (the worker bounds its calls) would leave that check waiting for
//! ever, holding one of the pool's slots, until the pool had none. Both checks here are
//! bounded by [`POOL_CHECK_TIMEOUT`]; a connection that does not answer in time is closed and
//! its slot freed. A connection may also be slow rather than silent (a given-up statement
//! still running on a busy server): each session asks the server to end a statement whose
//! client has gone, so that closing it leaves nothing running on (PostgreSQL 14's
//! `client_connection_check_interval`, 1 s, where the server supports it). And the server's
//! end of a silent connection lives on unless the server finds out: each session sets the
//! server's TCP keepalive to find an unreachable client within about 25 s, so that a
//! transaction such a client left open does not hold its locks for the system's 2 hours.

use std::time::Duration;

use sqlx::postgres::{PgConnection, PgPoolOptions};
use sqlx::{Connection, Executor, Row};

use crate::sql;

/// How long a connection taken from or given back to a [`pool_options`] pool may take to
/// answer the pool's check (one round trip of a trivial message) before it is taken for
/// dead and closed: 5 seconds. An idle server answers in well under a millisecond; one too
/// busy to answer in 5 seconds costs a reconnection, no more.
pub const POOL_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an acquire from the worker's own pools (and its LISTEN connection's) may take
/// before it fails like a lost connection, for the worker's loop to try again: 5 seconds.
///
/// sqlx retries a connection the server refuses (down, or `57P03`: starting up, shutting
/// down, in recovery) inside the acquire, sleeping between tries for twice as long each time
/// up to a fifth of the pool's `acquire_timeout`, and never tries sooner: with sqlx's default
/// (30 s), a worker whose acquire began during a restart slept up to 6 s past the server's
/// return, and every statement of the worker queued behind it (a restart of 5 s idled a fleet
/// for 5 s more). At 5 s, the tries are at most 1 s apart, so the worker claims again within
/// about a second of the server accepting connections; while the server stays down, each
/// loop's acquire fails every 5 s (one log line each) and is tried again after that loop's own
/// pause, never in a busy loop. A server that accepts connections but takes longer than this
/// to open one, or a pool whose every connection is held longer, fails the call, which is
/// tried again as after a lost connection.
///
/// An application's pool has the same back-off: see the README's "Server restarts".
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Pool options for the application's pool and the worker's own: a connection given back
/// inside a transaction sqlx does not know of (a cancelled `begin()`) is closed, never
/// reused; and a connection that does not answer the pool's checks within
/// [`POOL_CHECK_TIMEOUT`] (its server or the network went silent) is closed, never waited on
/// for ever; and each session asks the server to end a session whose client has gone or can
/// no longer be reached (`SET`s on connect, one round trip each). Set
/// the pool's size and timeouts on the result as usual; setting its `before_acquire`,
/// `after_release` or `after_connect` hook replaces the one here (sqlx keeps one of each).
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
    PgPoolOptions::new()
        .after_connect(|conn, _meta| Box::pin(async move { setup_session(conn).await }))
        // sqlx's own check of an idle connection has no bound: the same check, bounded. An
        // error closes the connection without a goodbye, and the acquire goes on to another
        // connection or opens one.
        .test_before_acquire(false)
        .before_acquire(|conn, _meta| {
            Box::pin(async move {
                bounded("taken from the pool", conn.ping()).await?;
                Ok(true)
            })
        })
        .after_release(|conn, _meta| {
            Box::pin(async move {
                // An error here closes the connection without a goodbye, and sqlx's own
                // (unbounded) check after this hook is skipped. After an answer it still
                // runs: a connection that goes silent in the microseconds between the two
                // keeps its slot until the kernel gives up on it (sqlx 0.8 has no way to
                // skip that check).
                let in_transaction =
                    bounded("given back to the pool", in_transaction(conn)).await?;
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

/// The settings [`setup_session`] asks of each new session, each sent on its own so that a
/// server refusing one keeps its default for it and the connection is used all the same.
///
/// 1. While a statement runs, the server checks every second that the client is still there,
///    and ends the session when it is not (`client_connection_check_interval`, PostgreSQL 14;
///    only on Linux servers). A caller that gives up on a statement (the worker bounds its
///    calls) has its connection closed; without this the statement ran on to its end, holding
///    its locks and a server connection, while the pool opened another in its place.
/// 2. Between statements (idle, or idle inside a transaction), the server's TCP keepalive finds
///    a client it can no longer reach (a host gone, a flow a firewall dropped) after about 25 s
///    (10 s idle, then 3 probes 5 s apart; `tcp_user_timeout` bounds data it sends
///    unacknowledged to 25 s), instead of the operating system's 2 hours: a session left
///    inside a transaction by such a client held its row and advisory locks that long (a job
///    whose row it was could not be rescued; claims of a rate-limited kind waited). A live
///    client's kernel answers the probes, whatever its transaction does, so nothing else is
///    ended; over a Unix socket these do nothing.
///
/// Plain `SET`s, not a `DO` block: a block needs the right to use PL/pgSQL, which a hardened
/// database may not grant, and then no connection would open.
const SESSION_SETTINGS: [&str; 5] = [
    "SET client_connection_check_interval = '1s'",
    "SET tcp_keepalives_idle = 10",
    "SET tcp_keepalives_interval = 5",
    "SET tcp_keepalives_count = 3",
    "SET tcp_user_timeout = '25s'",
];

/// Has the server end a session whose client has gone, whether a statement runs (a connection
/// closed because it did not answer a check) or not (a client cut off inside a transaction):
/// `client_connection_check_interval` 1 s, and the server's TCP keepalive (10 s idle, then 3
/// probes 5 s apart, `tcp_user_timeout` 25 s); each a plain `SET`, kept at the server's
/// default when the server refuses it. One round trip each on a new connection.
///
/// [`pool_options`] runs it on every new connection. A pool that sets its own
/// `after_connect` (which replaces that hook in sqlx) calls it there:
///
/// ```no_run
/// # async fn f() -> Result<(), sqlx::Error> {
/// let pool = job_postgres::pool_options()
///     .after_connect(|conn, _meta| {
///         Box::pin(async move {
///             job_postgres::setup_session(conn).await?;
///             sqlx::query("SET search_path = app, public").execute(conn).await?;
///             Ok(())
///         })
///     })
///     .connect("postgres://postgres@127.0.0.1/app")
///     .await?;
/// # Ok(()) }
/// ```
pub async fn setup_session(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    for setting in SESSION_SETTINGS {
        match conn.execute(sqlx::raw_sql(setting)).await {
            // Refused by this server (unknown there, or not allowed): its default stays.
            Ok(_) | Err(sqlx::Error::Database(_)) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// `check`, failing with a timeout when the connection has not answered it within
/// [`POOL_CHECK_TIMEOUT`].
async fn bounded<T>(
    when: &str,
    check: impl std::future::Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    match tokio::time::timeout(POOL_CHECK_TIMEOUT, check).await {
        Ok(checked) => checked,
        Err(_) => {
            tracing::warn!(
                "a connection {when} did not answer within {POOL_CHECK_TIMEOUT:?}: closing it \
                 (its server or the network went silent)"
            );
            Err(timed_out(format!(
                "the connection did not answer within {POOL_CHECK_TIMEOUT:?}"
            )))
        }
    }
}

/// The error of a statement given up after a bound of ours, as sqlx reports a socket timeout
/// (a lost connection: the callers retry it like one).
pub(crate) fn timed_out(message: String) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, message))
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
