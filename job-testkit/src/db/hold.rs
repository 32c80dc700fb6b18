//! The restart hold: `job.rescue_expired` rescues no lease in the first seconds of a server's
//! life (migration 0041), so a test that crashes an execution on a server started a moment
//! ago (the private fallback cluster, a CI job that starts PostgreSQL just before the tests)
//! would see its job rescued only after the hold, past every wait of the testkit. The first
//! [`TestDb`](super::TestDb) of a process waits the hold out instead, saying so.

use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

/// What the rescue function's hold reads like: `now() < started.at + interval '15 seconds'`.
const HOLD_MARK: &str = "started.at + interval '";

/// The hold, read from the rescue function's definition: the interval after the server's
/// start during which it rescues no lease that ran out around the start. `None` when the
/// definition has no such clause (a later migration changed it).
pub(super) fn restart_hold(definition: &str) -> Option<Duration> {
    let rest = &definition[definition.find(HOLD_MARK)? + HOLD_MARK.len()..];
    let (amount, unit) = rest[..rest.find('\'')?].trim().split_once(' ')?;
    let amount: u64 = amount.parse().ok()?;
    let seconds = match unit.trim_end_matches('s') {
        "second" => amount,
        "minute" => amount.checked_mul(60)?,
        _ => return None,
    };
    Some(Duration::from_secs(seconds))
}

/// How long is left of the hold on a server whose start was `age` ago: `None` once past it.
pub(super) fn left(hold: Duration, age: Duration) -> Option<Duration> {
    hold.checked_sub(age).filter(|left| !left.is_zero())
}

/// What the wait says on stderr.
pub(super) fn notice(server: &str, age: Duration, hold: Duration, left: Duration) -> String {
    format!(
        "job-testkit: the PostgreSQL server at {server} started {:.1}s ago, and \
         job.rescue_expired rescues no lease in the first {}s of a server's life (the restart \
         hold, migration 0041): the first TestDb of this process waits {:.1}s for it to pass, \
         so that a crashed execution is rescued within the testkit's waits",
        age.as_secs_f64(),
        hold.as_secs(),
        left.as_secs_f64()
    )
}

/// Waits, once per process, until the server of `database` (a migrated test database) is
/// past the restart hold. Errors are only told: the hold is a matter of time, not of
/// correctness, and the test may well need no rescue.
pub(super) async fn wait_out(database: &PgConnectOptions, server: &str) {
    static PAST: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    PAST.get_or_init(|| async {
        if let Err(e) = wait(database, server).await {
            eprintln!("job-testkit: could not read the server's restart hold ({e}); not waiting");
        }
    })
    .await;
}

async fn wait(database: &PgConnectOptions, server: &str) -> Result<(), String> {
    let mut conn = super::admin::connect(database).await?;
    let definition: String = sqlx::query_scalar(
        "SELECT pg_get_functiondef('job.rescue_expired(integer)'::regprocedure)",
    )
    .fetch_one(&mut conn)
    .await
    .map_err(|e| e.to_string())?;
    let Some(hold) = restart_hold(&definition) else {
        eprintln!(
            "job-testkit: job.rescue_expired has no restart hold the testkit recognizes \
             (`{HOLD_MARK}<n> seconds'`); not waiting for one"
        );
        let _ = conn.close().await;
        return Ok(());
    };
    let first = server_age(&mut conn).await?;
    if let Some(wait) = left(hold, first) {
        eprintln!("{}", notice(server, first, hold, wait));
        // By the server's clock, in steps, so that a restart meanwhile (which moves the start)
        // is seen; bounded, should the server keep restarting.
        let give_up = tokio::time::Instant::now() + hold * 2;
        while let Some(wait) = left(hold, server_age(&mut conn).await?) {
            if tokio::time::Instant::now() > give_up {
                break;
            }
            tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
        }
    }
    let _ = conn.close().await;
    Ok(())
}

/// How long ago the server started, as the rescue function counts it.
async fn server_age(conn: &mut PgConnection) -> Result<Duration, String> {
    let seconds: f64 = sqlx::query_scalar(
        "SELECT greatest(extract(epoch FROM clock_timestamp() - job.server_started_at()), 0)::float8",
    )
    .fetch_one(conn)
    .await
    .map_err(|e| e.to_string())?;
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The newest migration that defines `job.rescue_expired`, as the server has it (not
    /// one that only alters its settings, as migration 0066 does).
    fn rescue_definition() -> &'static str {
        job_postgres::MIGRATIONS
            .iter()
            .rev()
            .find(|m| {
                m.sql.contains("CREATE FUNCTION job.rescue_expired(")
                    || m.sql
                        .contains("CREATE OR REPLACE FUNCTION job.rescue_expired(")
            })
            .expect("a migration defines job.rescue_expired")
            .sql
    }

    #[test]
    fn the_hold_is_read_from_the_current_rescue_function() {
        assert_eq!(
            restart_hold(rescue_definition()),
            Some(Duration::from_secs(15))
        );
    }

    #[test]
    fn a_definition_without_a_hold_has_none() {
        assert_eq!(restart_hold("SELECT 1"), None);
        assert_eq!(
            restart_hold("now() < started.at + interval '2 minutes'"),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            restart_hold("now() < started.at + interval '1 fortnight'"),
            None
        );
    }

    #[test]
    fn what_is_left_of_the_hold_counts_from_the_start() {
        let hold = Duration::from_secs(15);
        assert_eq!(
            left(hold, Duration::from_millis(3_500)),
            Some(Duration::from_millis(11_500))
        );
        assert_eq!(left(hold, hold), None);
        assert_eq!(left(hold, Duration::from_secs(3600)), None);
    }

    #[test]
    fn the_notice_says_why_and_how_long() {
        let said = notice(
            "127.0.0.1:5432",
            Duration::from_millis(3_500),
            Duration::from_secs(15),
            Duration::from_millis(11_500),
        );
        for needle in [
            "started 3.5s ago",
            "first 15s",
            "waits 11.5s",
            "migration 0041",
        ] {
            assert!(said.contains(needle), "{needle:?} in {said}");
        }
    }
}
