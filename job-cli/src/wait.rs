//! How long a command waits for the database (`--timeout`): a lock held on the job tables (a
//! migration, a `LOCK TABLE`, a long transaction) or a busy server made every command that
//! reads or writes `job.jobs` wait for ever; an operator's `job stats` at 3 a.m. hung with no
//! word. Now the database stops a statement that waits longer, and the command says so.
//!
//! A database that does not answer at all (a network partition, a stopped server) cannot stop
//! anything, and the kernel waits a quarter of an hour or more for a connection whose peer
//! says nothing: so the command also gives up by itself on each request it makes of the
//! database ([`Bound`]), `--timeout` and [`MARGIN`] after sending it.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

use crate::cli::Command;

/// The shortest `--timeout` taken: below it even an idle server's answers may not come in time.
pub(crate) const MIN_TIMEOUT: Duration = Duration::from_millis(100);

/// The longest `--timeout` taken: nobody waits longer for a command's answer.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// `--timeout` refused, naming it, when outside [`MIN_TIMEOUT`]..=[`MAX_TIMEOUT`].
pub(crate) fn timeout_problem(timeout: Duration) -> Option<String> {
    (!(MIN_TIMEOUT..=MAX_TIMEOUT).contains(&timeout)).then(|| {
        format!(
            "--timeout must be from 100ms to 1h, got {}",
            humantime::format_duration(timeout)
        )
    })
}

/// The session setting that bounds `command`'s waits: `statement_timeout` (which covers a
/// statement's wait for a lock too), or for `migrate` `lock_timeout` only (a migration's own
/// statements may run for minutes on a large table; waiting for a lock behind a long
/// transaction also holds every later statement on the table behind the migration). `web`
/// bounds its own statements per request (`DashboardConfig::answer_within`): none.
pub(crate) fn setting(command: &Command) -> Option<&'static str> {
    match command {
        Command::Web { .. } => None,
        Command::Migrate { .. } => Some("lock_timeout"),
        _ => Some("statement_timeout"),
    }
}

/// `options` with `command`'s bound of `timeout` asked of every session at its start (a
/// startup parameter: no round trip), after any the URL gives. `migrate`'s session gets the
/// rest of its settings from the store's migration (its tag, and the server's
/// `idle_in_transaction_session_timeout` a second after the watch's limit: see
/// `PgStore::migrate_with_idle_limit`), which is given `timeout` and [`MARGIN`].
pub(crate) fn bounded(
    options: PgConnectOptions,
    command: &Command,
    timeout: Duration,
) -> PgConnectOptions {
    match setting(command) {
        Some(name) => options.options([(name, format!("{}ms", timeout.as_millis()))]),
        None => options,
    }
}

/// `error`, said as the bound it ran into when the database stopped a statement at
/// `--timeout` (`57014`, `query_canceled`; `55P03`, `lock_not_available`) under `setting`
/// (the command's, [`setting`]), else unchanged.
pub(crate) fn explained(
    error: crate::commands::Error,
    setting: Option<&str>,
    timeout: Duration,
) -> crate::commands::Error {
    let Some(code) = sqlstate(&*error) else {
        return error;
    };
    let waited = humantime::format_duration(timeout);
    match (code.as_str(), setting) {
        ("55P03", Some("lock_timeout")) => format!(
            "job migrate waited more than {waited} (--timeout) for a lock another transaction \
             holds (another migrator, or a long transaction on the job tables): nothing of the \
             migration it waited in was applied (those before it stay); run it again when that \
             transaction ends, or give a longer --timeout ({error})"
        )
        .into(),
        ("57014" | "55P03", Some("statement_timeout")) => format!(
            "the database did not answer within {waited} (--timeout): a lock held on the job \
             tables (a migration, a long transaction) or a busy server; the statement was \
             stopped and rolled back. Run it again, or give a longer --timeout ({error})"
        )
        .into(),
        _ => error,
    }
}

/// What the command waits beyond `--timeout` before it gives up on a request by itself: the
/// server's own stop of a statement at `--timeout` ([`setting`]) comes back within a round
/// trip, and a request may have to open a connection first, so only a database that does not
/// answer at all runs into it.
pub(crate) const MARGIN: Duration = Duration::from_secs(2);

/// The command's own bound on each request it makes of the database: one call of the store
/// (a stats read, a page of a listing, a check, a cancel), given up `--timeout` for each of
/// its statements plus [`MARGIN`] after it started, with [`NoAnswer`]. Per request, not per
/// command: `list --json` reads a page at a time and `purge` asks the operator between its
/// requests. `migrate` has
/// none (a migration's own statements may run long on a large table), nor has `web` (its
/// `answer_within`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    timeout: Duration,
    changes: bool,
}

impl Bound {
    /// `command`'s bound for `--timeout` `timeout`.
    pub(crate) fn new(command: &Command, timeout: Duration) -> Bound {
        let changes = matches!(
            command,
            Command::Cancel { .. }
                | Command::Redrive(_)
                | Command::Purge { .. }
                | Command::Pause(_)
                | Command::Resume(_)
                | Command::Enqueue(_)
        );
        Bound { timeout, changes }
    }

    /// What `request`, one statement, answered, or [`NoAnswer`] when it has not within the
    /// bound (it is dropped, and with it its connection: the server ends a session whose
    /// client has gone).
    pub(crate) async fn answer<T, E>(
        self,
        request: impl Future<Output = Result<T, E>>,
    ) -> Result<T, crate::commands::Error>
    where
        E: Into<crate::commands::Error>,
    {
        self.answer_of(1, request).await
    }

    /// [`answer`](Self::answer) for a request that sends up to `statements` statements one
    /// after the other (`check`'s reads, `stats`' three, a redrive's transaction): the server
    /// lets each run for `--timeout`, so the command waits for all of them, not for one, before
    /// it calls the database silent; a slow but answering database is stopped by the server.
    pub(crate) async fn answer_of<T, E>(
        self,
        statements: u32,
        request: impl Future<Output = Result<T, E>>,
    ) -> Result<T, crate::commands::Error>
    where
        E: Into<crate::commands::Error>,
    {
        let within = self.timeout.saturating_mul(statements.max(1)) + MARGIN;
        match tokio::time::timeout(within, request).await {
            Ok(answered) => answered.map_err(Into::into),
            Err(_) => Err(NoAnswer {
                timeout: self.timeout,
                changes: self.changes,
            }
            .into()),
        }
    }
}

/// A request the database did not answer within its [`Bound`]: nothing came back, not even the
/// server's own stop of the statement at `--timeout`.
#[derive(Debug)]
pub(crate) struct NoAnswer {
    timeout: Duration,
    /// Whether the command changes something (cancel, redrive, purge, pause, resume, enqueue),
    /// which may or may not have been done.
    changes: bool,
}

impl fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the database did not answer within {} (--timeout), nor in the {} after: nothing \
             came back, not even the server's stop of the statement, as when the network to it \
             is down or the server is stopped",
            humantime::format_duration(self.timeout),
            humantime::format_duration(MARGIN)
        )?;
        if self.changes {
            f.write_str(
                "; the change asked for may or may not have been made: look (job show, \
                 job list) before running it again",
            )
        } else {
            f.write_str("; run it again once the database answers")
        }
    }
}

impl std::error::Error for NoAnswer {}

/// The SQLSTATE of the database error somewhere in `error`'s chain of sources.
fn sqlstate(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(sqlx::Error::Database(db)) = e.downcast_ref::<sqlx::Error>() {
            return db.code().map(|code| code.into_owned());
        }
        next = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Bound, MARGIN};
    use crate::cli::Command;

    const TIMEOUT: Duration = Duration::from_secs(30);

    /// `--timeout 30s` (the default), on a clock that only moves when every task waits: a
    /// request answers after `took`.
    async fn answered(statements: u32, took: Duration) -> bool {
        let bound = Bound::new(&Command::Paused, TIMEOUT);
        let request = async {
            tokio::time::sleep(took).await;
            Ok::<_, std::io::Error>(())
        };
        bound.answer_of(statements, request).await.is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_of_several_statements_is_given_the_timeout_for_each() {
        let moment = Duration::from_millis(1);
        assert!(answered(1, TIMEOUT + MARGIN - moment).await);
        assert!(!answered(1, TIMEOUT + MARGIN + moment).await);
        // Three statements of 25 s each answer (the server stops none of them): 75 s.
        assert!(answered(3, 3 * Duration::from_secs(25)).await);
        assert!(!answered(3, 3 * TIMEOUT + MARGIN + moment).await);
    }
}
