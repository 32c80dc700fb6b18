//! The watch over a migration's session ([`crate::migrate`]). A migration's statements may run
//! for minutes on a large table, so nothing can give up on them after a fixed time; but a
//! database that stopped answering (a network down, a stopped server) or an answer lost on
//! the way (a proxy that dropped the connection) left `migrate` waiting for ever (an
//! application that migrates at startup never started, and said nothing), and the kernel waits
//! a quarter of an hour or more before it calls such a connection dead (sqlx sets no TCP
//! keepalive).
//!
//! So while the migration runs, a second connection asks the server, every [`PERIOD`], what
//! the migration's session (one connection, named by a tag of this process in
//! `application_name`) is doing. While the server works on one of its statements (`active`,
//! a wait for a lock included) the migration waits as long as it takes. When the session has
//! been doing nothing for this process for longer than the idle limit (`idle`, `idle in
//! transaction`: the answer was sent and never came; by the server's clock, since its state
//! last changed), the watch asks the server to end it, if it is still so, so that no lock of
//! the migration stays held behind it, and gives up. It also gives up when the session, once
//! seen, has been gone from the server for [`GONE_AFTER`], and when the second connection has
//! had no answer, or only errors, for [`SILENT_AFTER`] (or the idle limit, when longer); each
//! said apart ([`MigrationGaveUp`]). The session itself also has `idle_in_transaction_session_timeout`
//! a second past the idle limit, so the server ends it, in a transaction, when this process
//! can no longer reach it.
//!
//! "Idle for the process" also covers a process that is alive but stalled (stopped with
//! SIGSTOP, a paused VM) for longer than the idle limit: its session is then ended and the
//! migration says the answer was lost. Migrating again is safe.
//!
//! What it cannot see it says once, at WARN, and goes on: a session whose state the server
//! does not show (`track_activities` off, a role that may not read that session's activity)
//! or that it cannot find (a connection pooler in between). A statement the server works on
//! for ever (a commit waiting for a synchronous standby that never answers) is waited for.

use std::future::Future;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;
use tokio::time::Instant;

use crate::error::Error;

/// How often the second connection asks after the migration's session.
pub(crate) const PERIOD: Duration = Duration::from_millis(500);

/// The shortest time without an answer to the second connection after which the database is
/// called silent: a look may have to connect again, and a server busy with a migration's I/O
/// may answer slowly; the idle limit when longer.
const SILENT_AFTER: Duration = Duration::from_secs(10);

/// How long the migration's session, once seen, may be gone from the server before the
/// migration is given up (its end is asynchronous: a look may come before the next session
/// of a pool shows up, or after a session that ended by itself).
const GONE_AFTER: Duration = Duration::from_secs(2);

/// How long the watch's connection may go without an answer before the database is called
/// silent, for `idle_limit`: [`SILENT_AFTER`], or the limit when longer.
pub(crate) fn silent_after(idle_limit: Duration) -> Duration {
    idle_limit.max(SILENT_AFTER)
}

/// The `application_name` of a migration session: unique among the migrations under way at
/// once (its process id, the time it started, and how many this process started before it).
pub(crate) fn tag() -> String {
    static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "job migrate {}.{}.{}",
        std::process::id(),
        started.as_micros() % 1_000_000_000_000,
        STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// Why a migration was given up ([`Error::MigrateGaveUp`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MigrationGaveUp {
    /// The second connection, which watches the migration's session, had no answer for
    /// `waited`: the database stopped answering (a network down, a stopped server).
    Silent {
        /// How long it had no answer.
        waited: Duration,
    },
    /// The second connection's requests kept failing for `waited`, last with `error`: what
    /// the migration's session does is not known.
    CannotWatch {
        /// How long they failed.
        waited: Duration,
        /// The last error.
        error: String,
    },
    /// The migration's session did nothing for this process for longer than `idle_limit`,
    /// in `state` (`idle`, `idle in transaction`): its answer was lost on the way. The server
    /// was asked to end that session, so no lock of it stays held.
    Lost {
        /// The session's state.
        state: String,
        /// The idle limit it passed.
        idle_limit: Duration,
    },
    /// The migration's session ended on the server while this process waited for its answer
    /// (a restart, an administrator, or the server's `idle_in_transaction_session_timeout`
    /// after an answer was lost).
    Gone,
}

impl std::fmt::Display for MigrationGaveUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = humantime::format_duration;
        match self {
            MigrationGaveUp::Silent { waited } => write!(
                f,
                "the database did not answer the second connection, which watches the \
                 migration's session, for {} (a network down, a stopped server)",
                d(*waited)
            ),
            MigrationGaveUp::CannotWatch { waited, error } => write!(
                f,
                "the second connection, which watches the migration's session, kept failing \
                 for {} ({error}), so what the migration's session does is not known",
                d(*waited)
            ),
            MigrationGaveUp::Lost { state, idle_limit } => write!(
                f,
                "the migration's session waited for this process for more than {} ({state}): \
                 its answer was lost on the way (a dropped connection, a proxy). The server \
                 was asked to end that session, so no lock of it stays held",
                d(*idle_limit)
            ),
            MigrationGaveUp::Gone => write!(
                f,
                "the migration's session ended on the server while this process waited for \
                 its answer (a restart, an administrator, or the server's \
                 idle_in_transaction_session_timeout after an answer was lost)"
            ),
        }
    }
}

/// What the second connection saw of the migration's session.
enum Seen {
    /// The server works on one of its statements.
    Working,
    /// It has done nothing for the process for `idle_for` (by the server's clock: since its
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

/// The watch's connection, opened with `options` (the migration's, under another name) before
/// the migration starts, so that a server that refuses a second connection is said before
/// anything is migrated, not found out when an answer is lost.
pub(crate) async fn open(
    options: &PgConnectOptions,
    idle_limit: Duration,
) -> Result<(PgConnection, PgConnectOptions), Error> {
    // No notices: a WARNING of the server's (a session that ended before the watch could end
    // it) would be logged for nothing.
    let options = options
        .clone()
        .application_name("job migrate (watch)")
        .options([("client_min_messages", "error")]);
    let silent_after = silent_after(idle_limit);
    match tokio::time::timeout(silent_after, PgConnection::connect_with(&options)).await {
        Ok(Ok(conn)) => Ok((conn, options)),
        Ok(Err(e)) => Err(Error::MigrateWatch(e.to_string())),
        Err(_) => Err(Error::MigrateWatch(format!(
            "no answer within {}",
            humantime::format_duration(silent_after)
        ))),
    }
}

/// Runs `migrating` (the migration, on the session tagged `tag`) to its end, or gives up as
/// the module says, watching from `watch` (made by [`open`]; connected again with `options`
/// after a failure).
pub(crate) async fn migration(
    migrating: impl Future<Output = Result<(), Error>>,
    (watch, options): (PgConnection, PgConnectOptions),
    tag: &str,
    idle_limit: Duration,
) -> Result<(), Error> {
    let mut watch = Some(watch);
    let watched = watching(migrating, &mut watch, &options, tag, idle_limit).await;
    // A goodbye, bounded, unless the database went silent: a connection dropped without one
    // is logged by the server, at every start of an application that migrates.
    if let Some(conn) = watch {
        if !matches!(
            watched,
            Err(Error::MigrateGaveUp(MigrationGaveUp::Silent { .. }))
        ) {
            let _ = tokio::time::timeout(PERIOD, conn.close()).await;
        }
    }
    watched
}

/// [`migration`]'s watch, on `watch` (connected again with `options` after a failure, `None`
/// while it is not).
async fn watching(
    migrating: impl Future<Output = Result<(), Error>>,
    watch: &mut Option<PgConnection>,
    options: &PgConnectOptions,
    tag: &str,
    idle_limit: Duration,
) -> Result<(), Error> {
    let silent_after = silent_after(idle_limit);
    let gave_up = |why| Err(Error::MigrateGaveUp(why));
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
            look(watch, options, tag, silent_after).await
        };
        let seen = tokio::select! {
            // The migration first: one that ended is never given up.
            biased;
            done = &mut migrating => return done,
            seen = look => seen,
        };
        let now = Instant::now();
        let seen = match seen {
            Look::Seen(seen) => seen,
            Look::Silent => {
                return gave_up(MigrationGaveUp::Silent {
                    waited: silent_after,
                })
            }
            Look::Failed(error) => {
                if now.duration_since(*failing_since.get_or_insert(now)) > silent_after {
                    return gave_up(MigrationGaveUp::CannotWatch {
                        waited: silent_after,
                        error,
                    });
                }
                continue;
            }
        };
        failing_since = None;
        if !matches!(seen, Seen::Gone) {
            gone_since = None;
        }
        if !matches!(seen, Seen::Idle { idle_for, .. } if idle_for > idle_limit) {
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
                if idle_for <= idle_limit {
                    continue;
                }
                let conn = watch.as_mut().expect("the look that saw it connected");
                match end(conn, pid, tag, &changed, silent_after).await {
                    End::Asked => return gave_up(MigrationGaveUp::Lost { state, idle_limit }),
                    // It moved on (or ended) meanwhile: looked at again.
                    End::MovedOn => end_failing_since = None,
                    End::Silent => {
                        return gave_up(MigrationGaveUp::Silent {
                            waited: silent_after,
                        })
                    }
                    // The watch connects again at the next look; given up as failed looks are.
                    End::Failed(error) => {
                        *watch = None;
                        let since = *end_failing_since.get_or_insert(now);
                        if now.duration_since(since) > silent_after {
                            return gave_up(MigrationGaveUp::CannotWatch {
                                waited: silent_after,
                                error,
                            });
                        }
                    }
                }
            }
            // Seen, though blind: once it is gone, the watch is told so.
            Seen::Blind if !blind_said => {
                seen_once = true;
                blind_said = true;
                tracing::warn!(
                    "the job migration cannot see what its session is doing (track_activities \
                     is off, or its role may not read that session's activity): an answer \
                     lost outside a transaction is not noticed, and one lost inside one only \
                     once the server ends the session"
                );
            }
            Seen::Blind => seen_once = true,
            Seen::Gone => {
                let gone_for = now.duration_since(*gone_since.get_or_insert(now));
                if seen_once && gone_for > GONE_AFTER {
                    return gave_up(MigrationGaveUp::Gone);
                }
                if !seen_once && gone_for > idle_limit && !blind_said {
                    blind_said = true;
                    tracing::warn!(
                        "the job migration cannot find its session on the server (a \
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
