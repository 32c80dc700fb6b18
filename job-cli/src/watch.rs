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
//! takes. When the session has been doing nothing for this command for longer than
//! `--timeout` and [`MARGIN`](crate::wait::MARGIN) (`idle`, `idle in transaction`: the answer
//! was sent and never came; by the server's clock, since its state last changed), the command
//! asks the server to end it, if it is still so, so that no lock of the migration stays held
//! behind it, and gives up. It also gives up when the session, once seen, has been gone from
//! the server for [`MARGIN`](crate::wait::MARGIN), and when the second connection has had no
//! answer, or only errors, for [`SILENT_AFTER`] (or that bound, when longer); each said apart.
//! The session itself also has `idle_in_transaction_session_timeout` a second past that bound
//! ([`crate::wait::bounded`]), so the server ends it, in a transaction, when the command can
//! no longer reach it.
//!
//! "Idle for the command" also covers a command that is alive but stalled (stopped with
//! SIGSTOP or ctrl-z, a paused VM) for longer than the bound: its session is then ended and
//! the command says the answer was lost. Running `job migrate` again is safe.
//!
//! What it cannot see it says once, as a warning line, and goes on: a session whose state the
//! server does not show (`track_activities` off, a role that may not read it) or that it
//! cannot find (a connection pooler in between). A statement the server works on for ever (a
//! commit waiting for a synchronous standby that never answers) is waited for.

use std::future::Future;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;
use tokio::time::Instant;

use crate::commands::Error;

/// How often the second connection asks after the migration's session.
pub(crate) const PERIOD: Duration = Duration::from_millis(500);

/// The shortest time without an answer to the second connection after which the database is
/// called silent: a look may have to connect again, and a server busy with a migration's I/O
/// may answer slowly; `--timeout` and [`MARGIN`](crate::wait::MARGIN) when longer.
const SILENT_AFTER: Duration = Duration::from_secs(10);

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
    /// state last changed at `changed`), in `state`; `pid` is its server process.
    Idle {
        state: String,
        pid: i32,
        idle_for: Duration,
        changed: String,
    },
    /// The server lists it without its state: `track_activities` is off, or the watch's role
    /// may not read that session's activity.
    Blind,
    /// The server has no such session on this database.
    Gone,
}

/// How a look went.
enum Look {
    Seen(Seen),
    /// The look failed with an error (a connection refused, say, at `max_connections`): the
    /// server or its host answers, but what the session does is not known.
    Failed(String),
    /// No answer came within its bound.
    Silent,
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
    // No notices: a WARNING of the server's (a session that ended before the command could
    // end it) would be logged before the command's one line.
    let watch_options = options
        .clone()
        .application_name("job migrate (watch)")
        .options([("client_min_messages", "error")]);
    let bound = timeout.saturating_add(crate::wait::MARGIN);
    let silent_after = bound.max(SILENT_AFTER);
    // Opened before the migration starts: a server that refuses a second connection is said
    // now, not found out when an answer is lost.
    let mut watch = match tokio::time::timeout(
        silent_after,
        PgConnection::connect_with(&watch_options),
    )
    .await
    {
        Ok(Ok(conn)) => Some(conn),
        Ok(Err(e)) => {
            return Err(format!(
                "job migrate cannot open its second connection, which watches the migration's \
                 session, so nothing was migrated: {e}"
            )
            .into())
        }
        Err(_) => {
            return Err(format!(
                "job migrate cannot open its second connection, which watches the migration's \
                 session, so nothing was migrated: no answer within {}",
                humantime::format_duration(silent_after)
            )
            .into())
        }
    };
    tokio::pin!(migrating);
    let mut failing_since: Option<Instant> = None;
    // Since when the requests to end an idle session have failed: apart from the looks', which
    // may succeed in between.
    let mut end_failing_since: Option<Instant> = None;
    let mut gone_since: Option<Instant> = None;
    let mut seen_once = false;
    let mut blind_said = false;
    loop {
        let look = async {
            tokio::time::sleep(PERIOD).await;
            look(&mut watch, &watch_options, &tag, silent_after).await
        };
        let seen = tokio::select! {
            // The migration first: one that ended is never given up.
            biased;
            done = &mut migrating => return done.map_err(Into::into),
            seen = look => seen,
        };
        let now = Instant::now();
        let seen = match seen {
            Look::Seen(seen) => seen,
            Look::Silent => return Err(silent(silent_after).into()),
            Look::Failed(error) => {
                if now.duration_since(*failing_since.get_or_insert(now)) > silent_after {
                    return Err(cannot_watch(silent_after, &error).into());
                }
                continue;
            }
        };
        failing_since = None;
        if !matches!(seen, Seen::Gone) {
            gone_since = None;
        }
        if !matches!(seen, Seen::Idle { idle_for, .. } if idle_for > bound) {
            end_failing_since = None;
        }
        match seen {
            Seen::Working => seen_once = true,
            Seen::Idle {
                state,
                pid,
                idle_for,
                changed,
            } => {
                seen_once = true;
                if idle_for <= bound {
                    continue;
                }
                let conn = watch.as_mut().expect("the look that saw it connected");
                match end(conn, pid, &tag, &changed, silent_after).await {
                    End::Asked => return Err(lost(&state, bound).into()),
                    // It moved on (or ended) meanwhile: looked at again.
                    End::MovedOn => end_failing_since = None,
                    End::Silent => return Err(silent(silent_after).into()),
                    // The watch connects again at the next look; given up as failed looks are.
                    End::Failed(error) => {
                        watch = None;
                        let since = *end_failing_since.get_or_insert(now);
                        if now.duration_since(since) > silent_after {
                            return Err(cannot_watch(silent_after, &error).into());
                        }
                    }
                }
            }
            // Seen, though blind: once it is gone, the command is told so.
            Seen::Blind if !blind_said => {
                seen_once = true;
                blind_said = true;
                say!(
                    "job: warning: job migrate cannot see what its session is doing \
                     (track_activities is off, or its role may not read that session's \
                     activity): an answer lost outside a transaction is not noticed, and one \
                     lost inside one only once the server ends the session"
                );
            }
            Seen::Blind => seen_once = true,
            Seen::Gone => {
                let gone_for = now.duration_since(*gone_since.get_or_insert(now));
                if seen_once && gone_for > crate::wait::MARGIN {
                    return Err(gone().into());
                }
                if !seen_once && gone_for > bound && !blind_said {
                    blind_said = true;
                    say!(
                        "job: warning: job migrate cannot find its session on the server (a \
                         connection pooler or a proxy in between?): only a database that stops \
                         answering is noticed"
                    );
                }
            }
        }
    }
}

/// What the server says the session tagged `tag` is doing, on `watch` (connected first when
/// it is not: a connection that failed is dropped and made again at the next look), within
/// `bound`.
async fn look(
    watch: &mut Option<PgConnection>,
    options: &PgConnectOptions,
    tag: &str,
    bound: Duration,
) -> Look {
    type Row = (i32, Option<String>, Option<f64>, Option<String>);
    let asked = async {
        if watch.is_none() {
            *watch = Some(PgConnection::connect_with(options).await?);
        }
        let conn = watch.as_mut().expect("connected above");
        // The session working on a statement first, else the one whose state changed last
        // (a pool may be closing one connection while it opens another).
        sqlx::query_as::<_, Row>(
            "SELECT pid, state, \
                    greatest(extract(epoch FROM clock_timestamp() - state_change), 0)::float8, \
                    state_change::text \
             FROM pg_catalog.pg_stat_activity \
             WHERE application_name = $1 AND datname = current_database() \
               AND pid <> pg_catalog.pg_backend_pid() \
             ORDER BY (state = 'active') IS TRUE DESC, state_change DESC NULLS LAST \
             LIMIT 1",
        )
        .bind(tag)
        .fetch_optional(conn)
        .await
    };
    match tokio::time::timeout(bound, asked).await {
        Ok(Ok(None)) => Look::Seen(Seen::Gone),
        Ok(Ok(Some((pid, Some(state), Some(idle_for), Some(changed))))) if state != "disabled" => {
            Look::Seen(if state == "active" {
                Seen::Working
            } else {
                Seen::Idle {
                    state,
                    pid,
                    idle_for: Duration::try_from_secs_f64(idle_for).unwrap_or_default(),
                    changed,
                }
            })
        }
        Ok(Ok(Some(_))) => Look::Seen(Seen::Blind),
        // Dropped, not closed: a connection that failed or does not answer would not answer a
        // goodbye either.
        Ok(Err(e)) => {
            *watch = None;
            Look::Failed(e.to_string())
        }
        Err(_) => {
            *watch = None;
            Look::Silent
        }
    }
}

/// How an attempt to end the session went.
enum End {
    /// The server was asked to end it.
    Asked,
    /// It had moved on (or ended) since it was seen idle.
    MovedOn,
    /// The request failed with an error.
    Failed(String),
    /// No answer came within its bound.
    Silent,
}

/// Ends the server process `pid`, the session tagged `tag`, if it is still idle as seen (its
/// state last changed at `changed`), within `bound`.
async fn end(conn: &mut PgConnection, pid: i32, tag: &str, changed: &str, bound: Duration) -> End {
    let ended = sqlx::query_scalar::<_, bool>(
        "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity \
         WHERE pid = $1 AND application_name = $2 AND state_change::text = $3 \
           AND state <> 'active'",
    )
    .bind(pid)
    .bind(tag)
    .bind(changed)
    .fetch_optional(conn);
    match tokio::time::timeout(bound, ended).await {
        Ok(Ok(Some(true))) => End::Asked,
        Ok(Ok(_)) => End::MovedOn,
        Ok(Err(e)) => End::Failed(e.to_string()),
        Err(_) => End::Silent,
    }
}

/// What follows each giving up.
const AGAIN: &str = "The migration it was in was rolled back unless its commit had been sent: \
                     run job migrate again, which applies only the migrations the database lacks";

/// The command's words when the second connection had no answer for `waited`.
fn silent(waited: Duration) -> String {
    format!(
        "job migrate gave up: the database did not answer the second connection, which watches \
         the migration's session, for {} (a network down, a stopped server). The server ends \
         the migration's session by itself once it has waited --timeout and 3s in a \
         transaction. {AGAIN}",
        humantime::format_duration(waited)
    )
}

/// The command's words when the second connection's requests (its looks, or its requests to
/// end an idle session) failed for `waited`, last with `error`.
fn cannot_watch(waited: Duration, error: &str) -> String {
    format!(
        "job migrate gave up: the second connection, which watches the migration's session, \
         kept failing for {} ({error}), so what the migration's session does is not known. \
         {AGAIN}",
        humantime::format_duration(waited)
    )
}

/// The command's words when the migration's session did nothing for it for `bound` (in
/// `state`), and the server was asked to end it.
fn lost(state: &str, bound: Duration) -> String {
    format!(
        "job migrate gave up: the migration's session waited for this command for more than {} \
         ({state}): its answer was lost on the way (a dropped connection, a proxy). The command \
         asked the server to end that session, so no lock of it stays held. {AGAIN}",
        humantime::format_duration(bound)
    )
}

/// The command's words when the migration's session ended on the server while the command
/// waited for its answer.
fn gone() -> String {
    format!(
        "job migrate gave up: the migration's session ended on the server while the command \
         waited for its answer (a restart, an administrator, or the server's \
         idle_in_transaction_session_timeout after an answer was lost). {AGAIN}"
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
                && error.contains("asked the server to end that session"),
            "{error}"
        );
        assert!(
            sqlx::query("SELECT 1").execute(&mut conn).await.is_err(),
            "the session was ended"
        );
        db.close().await;
    }
}
