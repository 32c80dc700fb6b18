//! `job migrate`'s watch over its own session. A migration's statements may run for minutes
//! on a large table, so the command cannot give up on them after `--timeout` as the other
//! commands do ([`Bound`](crate::wait::Bound)); but a database that stopped answering (a
//! network down, a stopped server) or an answer lost on the way (a proxy that dropped the
//! connection) left `job migrate` waiting for ever, and the kernel waits a quarter of an hour
//! or more before it calls such a connection dead.
//!
//! So while the migration runs, a second connection asks the server, every [`PERIOD`], what
//! the migration's session (one connection, named by a tag of this process in
//! `application_name`) is doing. While the server works on one of its statements (`active`,
//! a wait for a lock included, which `lock_timeout` bounds) the command waits as long as it
//! takes. When the session has been doing nothing for this command (`idle`, `idle in
//! transaction`: the answer was sent and never came; by the server's clock, since its state
//! last changed) or has gone for longer than `--timeout` and
//! [`MARGIN`](crate::wait::MARGIN), or when the second connection has had no answer for that
//! long, the command gives up, saying which, and ends the session on the server when it
//! can, so that no lock of the migration stays held behind it. The session itself also has
//! `idle_in_transaction_session_timeout` at that bound ([`crate::wait::bounded`]), so the
//! server ends it when the command can no longer reach it.

use std::future::Future;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;
use tokio::time::Instant;

use crate::commands::Error;

/// How often the second connection asks after the migration's session.
pub(crate) const PERIOD: Duration = Duration::from_millis(500);

/// The `application_name` of this process's migration session: unique among the processes
/// that migrate at once (its process id and the time it started).
pub(crate) fn tag() -> String {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "job migrate {}.{}",
        std::process::id(),
        started.as_micros() % 1_000_000_000_000
    )
}

/// What the second connection saw of the migration's session.
enum Seen {
    /// The server works on one of its statements.
    Working,
    /// It has done nothing for the command for `idle_for` (by the server's clock: since its
    /// state last changed), in `state`; `pid` is its server process.
    Idle {
        state: String,
        pid: i32,
        idle_for: Duration,
    },
    /// The server has no such session.
    Gone,
    /// The look failed with an error (the server refused a connection, say, at its
    /// `max_connections`): the server, or the host, answers, but what the session does is not
    /// known. The migration is not given up for it.
    Failed,
}

/// Runs `migrating` (the migration, on the session tagged in `options`' `application_name`)
/// to its end, or gives up as the module says. `options` are the migration's connection
/// options; the watch connects with them under another name.
pub(crate) async fn migration<E: Into<Error>>(
    migrating: impl Future<Output = Result<(), E>>,
    options: &PgConnectOptions,
    timeout: Duration,
) -> Result<(), Error> {
    let tag = options
        .get_application_name()
        .expect("the migration's session is tagged")
        .to_owned();
    let watch_options = options.clone().application_name("job migrate (watch)");
    let bound = timeout.saturating_add(crate::wait::MARGIN);
    tokio::pin!(migrating);
    let mut watch: Option<PgConnection> = None;
    let mut answered = Instant::now();
    let mut gone_since: Option<Instant> = None;
    loop {
        let look = async {
            tokio::time::sleep(PERIOD).await;
            look(&mut watch, &watch_options, &tag, bound).await
        };
        let seen = tokio::select! {
            done = &mut migrating => return done.map_err(Into::into),
            seen = look => seen,
        };
        let now = Instant::now();
        let Some(seen) = seen else {
            if now.duration_since(answered) > bound {
                return Err(silent(bound).into());
            }
            continue;
        };
        answered = now;
        if !matches!(seen, Seen::Gone | Seen::Failed) {
            gone_since = None;
        }
        match seen {
            Seen::Working | Seen::Failed => {}
            Seen::Idle {
                state,
                pid,
                idle_for,
            } if idle_for > bound => {
                let ended = match watch.as_mut() {
                    Some(conn) => end(conn, pid, bound).await,
                    None => false,
                };
                return Err(lost(Some(state), bound, ended).into());
            }
            Seen::Idle { .. } => {}
            Seen::Gone => {
                if now.duration_since(*gone_since.get_or_insert(now)) > bound {
                    return Err(lost(None, bound, false).into());
                }
            }
        }
    }
}

/// What the server says the session tagged `tag` is doing, on `watch` (connected first when
/// it is not: a connection that failed is dropped and made again at the next look); `None`
/// when no answer came within `bound`.
async fn look(
    watch: &mut Option<PgConnection>,
    options: &PgConnectOptions,
    tag: &str,
    bound: Duration,
) -> Option<Seen> {
    let asked = async {
        if watch.is_none() {
            *watch = Some(PgConnection::connect_with(options).await?);
        }
        let conn = watch.as_mut().expect("connected above");
        // The session working on a statement first, else the one whose state changed last
        // (a pool may be closing one connection while it opens another).
        sqlx::query_as::<_, (i32, Option<String>, f64)>(
            "SELECT pid, state, \
                    greatest(extract(epoch FROM clock_timestamp() - state_change), 0)::float8 \
             FROM pg_catalog.pg_stat_activity \
             WHERE application_name = $1 AND pid <> pg_catalog.pg_backend_pid() \
             ORDER BY state = 'active' DESC, state_change DESC NULLS LAST \
             LIMIT 1",
        )
        .bind(tag)
        .fetch_optional(conn)
        .await
    };
    match tokio::time::timeout(bound, asked).await {
        Ok(Ok(None)) => Some(Seen::Gone),
        Ok(Ok(Some((_, Some(state), _)))) if state == "active" => Some(Seen::Working),
        Ok(Ok(Some((pid, state, idle_for)))) => Some(Seen::Idle {
            state: state.unwrap_or_else(|| "unknown".to_owned()),
            pid,
            idle_for: Duration::try_from_secs_f64(idle_for).unwrap_or_default(),
        }),
        // Dropped, not closed: a connection that failed or does not answer would not answer a
        // goodbye either.
        Ok(Err(_)) => {
            *watch = None;
            Some(Seen::Failed)
        }
        Err(_) => {
            *watch = None;
            None
        }
    }
}

/// Ends the server process `pid` (the migration's session), within `bound`; whether it did.
async fn end(conn: &mut PgConnection, pid: i32, bound: Duration) -> bool {
    let ended = sqlx::query_scalar::<_, bool>("SELECT pg_catalog.pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(conn);
    matches!(tokio::time::timeout(bound, ended).await, Ok(Ok(true)))
}

/// The command's words when the second connection had no answer for `bound`.
fn silent(bound: Duration) -> String {
    format!(
        "job migrate gave up: the database did not answer for {} (--timeout and 2s), on the \
         migration's connection nor on a second one (a network down, a stopped server). The \
         server ends the migration's session by itself once it has waited that long in a \
         transaction, rolling back the migration it was in, unless its commit had been sent: \
         run job migrate again, which applies only the migrations the database lacks",
        humantime::format_duration(bound)
    )
}

/// The command's words when the migration's session did nothing for it for `bound` (in
/// `state`, or gone when `None`), ended by the command when `ended`.
fn lost(state: Option<String>, bound: Duration, ended: bool) -> String {
    let waited = humantime::format_duration(bound);
    let what = match (state, ended) {
        (None, _) => format!(
            "the migration's session is gone from the server, and no answer came for {waited} \
             (the server ended it: a restart, an administrator, or its wait for this command \
             past idle_in_transaction_session_timeout once an answer was lost)"
        ),
        (Some(state), true) => format!(
            "the migration's session waited for this command for more than {waited} ({state}): \
             its answer was lost on the way (a dropped connection, a proxy); the command ended \
             that session, so nothing of it holds a lock"
        ),
        (Some(state), false) => format!(
            "the migration's session waited for this command for more than {waited} ({state}): \
             its answer was lost on the way (a dropped connection, a proxy), and the command \
             could not end that session; the server ends it once it has waited that long in a \
             transaction"
        ),
    };
    format!(
        "job migrate gave up: {what}. The migration it was in was rolled back unless its \
         commit had been sent: run job migrate again, which applies only the migrations the \
         database lacks"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use job_testkit::TestDb;

    /// A session on `db`, tagged as `job migrate` tags its own, and its options.
    async fn tagged(db: &TestDb) -> (PgConnectOptions, PgConnection) {
        let options = db.connect_options().application_name(&tag());
        let conn = PgConnection::connect_with(&options).await.unwrap();
        (options, conn)
    }

    /// A statement the server works on longer than the bound (`--timeout` 100ms and 2s) is
    /// waited for to its end: a migration on a large table is not given up.
    #[tokio::test]
    async fn a_statement_the_server_works_on_is_waited_for_however_long() {
        let db = TestDb::new().await;
        let (options, mut conn) = tagged(&db).await;
        let migrating = async {
            sqlx::query("SELECT pg_sleep(4)")
                .execute(&mut conn)
                .await
                .map(drop)
        };
        migration(migrating, &options, Duration::from_millis(100))
            .await
            .expect("waited for to its end");
        db.close().await;
    }

    /// A session that has done nothing while the command waited for it longer than the bound
    /// (its answer lost on the way) is given up, and ended on the server.
    #[tokio::test]
    async fn a_session_idle_while_the_command_waits_is_given_up_and_ended() {
        let db = TestDb::new().await;
        let (options, mut conn) = tagged(&db).await;
        let waiting = std::future::pending::<Result<(), sqlx::Error>>();
        let error = migration(waiting, &options, Duration::from_millis(100))
            .await
            .expect_err("given up")
            .to_string();
        assert!(
            error.contains("for more than 2s 100ms (idle)")
                && error.contains("the command ended that session"),
            "{error}"
        );
        assert!(
            sqlx::query("SELECT 1").execute(&mut conn).await.is_err(),
            "the session was ended"
        );
        db.close().await;
    }
}
