//! The dashboard's own connections, on which the database itself ends every statement at the
//! request's bound ([`DashboardConfig::answer_within`]).
//!
//! Why a pool of its own, whose hooks set `statement_timeout` to what is left of each request's
//! time, rather than the application's pool:
//!
//! - a request answered 503 at its bound used to leave its statement running (or waiting for a
//!   lock) on the server, holding a connection of the application's pool until it ended:
//!   indefinitely behind a `LOCK TABLE`. A few reloads of a stalled page could take every
//!   connection the application's enqueues and handlers need. On connections of its own, the
//!   dashboard can hold at most [`DashboardConfig::connections`] connections, never one of the
//!   application's (as the worker keeps its own, see `Store::dedicated`);
//! - the store's reads and actions take a pool, not a connection, so a `SET LOCAL` in a
//!   transaction around them would mean another API for every one of them. A hook runs on the
//!   connection every time a statement borrows one (`before_acquire` for an idle connection,
//!   `after_connect` for a new one), inside the request's task, where the request's deadline is
//!   known (a task-local, set by `deadline::bound`);
//! - the statement's limit is what is left of the request's time less a margin, so the
//!   database gives up, and rolls the statement back, before the request's bound: a 503 for an
//!   action is then sent after the database stopped it, never before a write that could still
//!   commit behind the operator's back. Every action writes with one statement (autocommit),
//!   so an action the database stopped did nothing. `statement_timeout` covers the wait for a
//!   lock too, so no `lock_timeout` is needed.

use std::future::Future;
use std::time::{Duration, Instant};

use job_postgres::PgStore;

use crate::DashboardConfig;

tokio::task_local! {
    /// When the request being served must have its answer.
    static DEADLINE: Instant;
}

/// Runs `request` with `deadline` as the bound of every statement it sends on the dashboard's
/// connections.
pub(crate) async fn until<F: Future>(deadline: Instant, request: F) -> F::Output {
    DEADLINE.scope(deadline, request).await
}

/// How long before the request's bound the database must have given up, so that its error
/// reaches the page first: a fifth of the bound, at most half a second.
fn margin(within: Duration) -> Duration {
    (within / 5).min(Duration::from_millis(500))
}

/// The `statement_timeout` for a statement starting now, in milliseconds: what is left of the
/// request's time less the margin (outside a request, as if it had just begun), at least 1
/// (0 would mean no limit at all; 1 ends the statement at once).
fn statement_ms(within: Duration) -> u128 {
    let left = DEADLINE
        .try_with(|deadline| deadline.saturating_duration_since(Instant::now()))
        .unwrap_or(within);
    left.saturating_sub(margin(within)).as_millis().max(1)
}

/// Sets the statement limit on `conn` before a statement borrows it.
async fn bound(conn: &mut sqlx::PgConnection, within: Duration) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT set_config('statement_timeout', $1, false)")
        .bind(statement_ms(within).to_string())
        .execute(conn)
        .await?;
    Ok(())
}

/// `check`, failed as a lost connection when the connection has not answered it within the
/// request's bound or [`job_postgres::POOL_CHECK_TIMEOUT`], whichever is shorter.
async fn answered(
    within: Duration,
    check: impl Future<Output = Result<(), sqlx::Error>>,
) -> Result<(), sqlx::Error> {
    let bound = within.min(job_postgres::POOL_CHECK_TIMEOUT);
    tokio::time::timeout(bound, check)
        .await
        .unwrap_or_else(|_| {
            Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("a dashboard connection did not answer within {bound:?}"),
            )))
        })
}

/// A store on the dashboard's own connections, made from `store`'s connect options (URL, role,
/// TLS, `options`; not the hooks of the application's pool options), named
/// `<application name>: job dashboard` in `pg_stat_activity`. Lazy: no connection is opened
/// before a page needs one, and none is kept longer than a minute unused.
pub(crate) fn store(store: &PgStore, config: &DashboardConfig) -> PgStore {
    let within = config.answer_within;
    let base = (*store.pool().connect_options()).clone();
    let name = match base.get_application_name() {
        Some(app) => format!("{app}: job dashboard"),
        None => "job dashboard".to_owned(),
    };
    let options = base.application_name(&name);
    let pool = job_postgres::pool_options()
        .max_connections(config.connections.max(1))
        .min_connections(0)
        // Past the request's bound nobody waits for the connection any more.
        .acquire_timeout(within)
        .idle_timeout(Some(Duration::from_secs(60)))
        // The hooks' SET is a round trip that finds a dead connection as the test would, and
        // is itself bounded, so that a connection gone silent is closed rather than waited on.
        // (`after_connect` and `before_acquire` replace those of `pool_options`: the session
        // settings are asked for here again.)
        .test_before_acquire(false)
        .after_connect(move |conn, _| {
            Box::pin(async move {
                job_postgres::setup_session(conn).await?;
                answered(within, bound(conn, within)).await
            })
        })
        .before_acquire(move |conn, _| {
            Box::pin(async move {
                answered(within, bound(conn, within)).await?;
                Ok(true)
            })
        })
        .connect_lazy_with(options);
    PgStore::new(pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_is_a_fifth_of_the_bound_up_to_half_a_second() {
        assert_eq!(margin(Duration::from_secs(1)), Duration::from_millis(200));
        assert_eq!(margin(Duration::from_secs(5)), Duration::from_millis(500));
        assert_eq!(margin(Duration::from_secs(60)), Duration::from_millis(500));
    }

    /// The dashboard's hooks replace those of `pool_options`: they ask for the session settings
    /// that have the server end a session whose client has gone, as the application's do.
    #[tokio::test]
    async fn the_dashboards_sessions_carry_the_settings_of_the_application_pools() {
        let db = job_testkit::TestDb::new().await;
        let dashboard = store(&PgStore::new(db.pool()), &DashboardConfig::default());
        let mut conn = dashboard.pool().acquire().await.unwrap();
        for (setting, expected) in [
            ("client_connection_check_interval", "1s"),
            ("tcp_keepalives_idle", "10"),
            ("tcp_user_timeout", "25000"),
        ] {
            let value: String = sqlx::query_scalar(&format!("SHOW {setting}"))
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            assert_eq!(value, expected, "{setting}");
        }
        let timeout: String = sqlx::query_scalar("SHOW statement_timeout")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_ne!(timeout, "0", "the request's bound is set too");
        drop(conn);
        dashboard.pool().close().await;
        db.close().await;
    }

    #[tokio::test]
    async fn a_statement_gets_what_is_left_of_its_request_and_never_no_limit() {
        let within = Duration::from_secs(5);
        assert_eq!(statement_ms(within), 4500, "outside a request");
        let ms = until(Instant::now() + Duration::from_secs(2), async {
            statement_ms(within)
        })
        .await;
        assert!((1400..=1500).contains(&ms), "{ms}");
        let ms = until(Instant::now(), async { statement_ms(within) }).await;
        assert_eq!(ms, 1, "past its bound, a statement ends at once");
    }
}
