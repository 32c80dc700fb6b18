//! How long a command waits for the database (`--timeout`): a lock held on the job tables (a
//! migration, a `LOCK TABLE`, a long transaction) or a busy server made every command that
//! reads or writes `job.jobs` wait for ever; an operator's `job stats` at 3 a.m. hung with no
//! word. Now the database stops a statement that waits longer, and the command says so.

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
/// startup parameter: no round trip), after any the URL gives.
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
