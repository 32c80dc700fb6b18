//! The admin side of [`TestDb`](super::TestDb): connecting to the server's admin database,
//! the template's lock, creating and dropping databases. Every step is bounded, and a server
//! at its connection limit (SQLSTATE 53300, many test processes at once) is tried again for a
//! while before the test fails.

use std::future::Future;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, Executor, PgConnection};
use tokio::time::Instant;

/// How long a connection to the server may take once it has answered.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `CREATE DATABASE` or `DROP DATABASE` may take (a copy of the template on a
/// loaded server, the end of the sessions a drop forces off).
pub(super) const STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a connection refused for too many clients (53300) is tried again.
pub(super) const TOO_MANY_CLIENTS_WAIT: Duration = Duration::from_secs(30);

/// How long `TestDb::new` waits for another process building the template.
pub(super) const TEMPLATE_LOCK_WAIT: Duration = Duration::from_secs(120);

/// The template's advisory lock, on the admin database.
const TEMPLATE_LOCK: &str = "hashtextextended('job_testkit.template', 0)";

/// Whether `e` is the server refusing a connection for too many clients (53300).
pub(super) fn too_many_clients(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("53300"))
}

/// Runs `attempt` until it succeeds, fails otherwise than with 53300, or `bound` has passed
/// (then the last 53300), waiting 50 ms between the first tries and up to a second later.
pub(super) async fn retry_too_many_clients<T, F, Fut>(
    bound: Duration,
    mut attempt: F,
) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    let give_up = Instant::now() + bound;
    let mut pause = Duration::from_millis(50);
    loop {
        match attempt().await {
            Err(e) if too_many_clients(&e) && Instant::now() + pause < give_up => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

/// `future`, or an error naming `what` when it has not finished within `limit`.
pub(super) async fn bounded<T>(
    limit: Duration,
    what: &str,
    future: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, future).await {
        Ok(done) => done.map_err(|e| e.to_string()),
        Err(_) => Err(format!("{what} did not finish within {limit:?}")),
    }
}

/// A connection to `options`, each try bounded by [`CONNECT_TIMEOUT`], tried again while the
/// server has too many clients.
pub(super) async fn connect(options: &PgConnectOptions) -> Result<PgConnection, String> {
    bounded(
        CONNECT_TIMEOUT + TOO_MANY_CLIENTS_WAIT,
        "connecting",
        retry_too_many_clients(TOO_MANY_CLIENTS_WAIT, || async {
            tokio::time::timeout(CONNECT_TIMEOUT, options.connect())
                .await
                .unwrap_or(Err(sqlx::Error::PoolTimedOut))
        }),
    )
    .await
}

/// Takes the template's advisory lock, waiting at most `wait` for another session holding
/// it; past that, the error names the holder (its pid, application and what it runs).
pub(super) async fn lock_template(conn: &mut PgConnection, wait: Duration) -> Result<(), String> {
    let give_up = Instant::now() + wait;
    loop {
        let took: bool =
            sqlx::query_scalar(&format!("SELECT pg_try_advisory_lock({TEMPLATE_LOCK})"))
                .fetch_one(&mut *conn)
                .await
                .map_err(|e| e.to_string())?;
        if took {
            return Ok(());
        }
        if Instant::now() >= give_up {
            return Err(format!(
                "another session has held the template's lock for over {wait:?}: {}",
                template_lock_holder(conn).await
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Who holds the template's lock, as pg_locks and pg_stat_activity tell.
async fn template_lock_holder(conn: &mut PgConnection) -> String {
    // A bigint advisory key is in pg_locks as classid (high half) and objid (low half).
    let holder: Result<Option<(i32, String, String, String)>, _> = sqlx::query_as(&format!(
        "SELECT l.pid, coalesce(a.application_name, ''), coalesce(a.state, ''), \
                coalesce(left(a.query, 200), '') \
         FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
           AND ((l.classid::bigint << 32) | l.objid::bigint) = {TEMPLATE_LOCK} \
         LIMIT 1"
    ))
    .fetch_optional(&mut *conn)
    .await;
    match holder {
        Ok(Some((pid, application, state, query))) => format!(
            "server process {pid} (application {application:?}, {state}, last statement \
             {query:?}); end it with SELECT pg_terminate_backend({pid}) if it is stuck"
        ),
        Ok(None) => "its holder could not be found (it may have just let go)".to_owned(),
        Err(e) => format!("its holder could not be read: {e}"),
    }
}

/// Lets go of the template's lock.
pub(super) async fn unlock_template(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    conn.execute(format!("SELECT pg_advisory_unlock({TEMPLATE_LOCK})").as_str())
        .await
        .map(|_| ())
}

/// Drops database `name`, forcing its sessions off; bounded, and tried again while the
/// server has too many clients.
pub(super) async fn drop_database(admin: &PgConnectOptions, name: &str) -> Result<(), String> {
    let mut conn = connect(admin).await?;
    let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
    bounded(
        STATEMENT_TIMEOUT,
        "DROP DATABASE",
        conn.execute(drop.as_str()),
    )
    .await?;
    let _ = conn.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    /// A database error with SQLSTATE `code`, as the server sends.
    #[derive(Debug)]
    struct Refused(&'static str);

    impl std::fmt::Display for Refused {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "refused with {}", self.0)
        }
    }

    impl std::error::Error for Refused {}

    impl sqlx::error::DatabaseError for Refused {
        fn message(&self) -> &str {
            "sorry, too many clients already"
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn refused(code: &'static str) -> sqlx::Error {
        sqlx::Error::Database(Box::new(Refused(code)))
    }

    #[tokio::test(start_paused = true)]
    async fn too_many_clients_is_tried_again_until_it_goes_through() {
        let mut tries = 0;
        let done = retry_too_many_clients(Duration::from_secs(30), || {
            tries += 1;
            let now = tries;
            async move {
                if now < 4 {
                    Err(refused("53300"))
                } else {
                    Ok(now)
                }
            }
        })
        .await;
        assert_eq!(done.unwrap(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn too_many_clients_is_tried_again_only_within_its_bound() {
        let started = Instant::now();
        let mut tries = 0u32;
        let done: Result<(), _> = retry_too_many_clients(Duration::from_secs(5), || {
            tries += 1;
            async { Err(refused("53300")) }
        })
        .await;
        assert!(too_many_clients(&done.unwrap_err()));
        assert!(started.elapsed() <= Duration::from_secs(5));
        // 50, 100, 200, 400, 800 ms, then a second at a time.
        assert!((6..=9).contains(&tries), "{tries} tries");
    }

    #[tokio::test(start_paused = true)]
    async fn another_error_is_not_tried_again() {
        let mut tries = 0;
        let done: Result<(), _> = retry_too_many_clients(Duration::from_secs(30), || {
            tries += 1;
            async { Err(refused("3D000")) }
        })
        .await;
        assert_eq!(tries, 1);
        assert!(!too_many_clients(&done.unwrap_err()));
    }

    #[tokio::test]
    async fn a_template_lock_held_elsewhere_times_out_naming_its_holder() {
        let admin = super::super::admin_options().await;
        let mut holder = connect(&admin).await.unwrap();
        lock_template(&mut holder, Duration::from_secs(10))
            .await
            .unwrap();
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut holder)
            .await
            .unwrap();
        let mut waiter = connect(&admin).await.unwrap();
        let said = lock_template(&mut waiter, Duration::from_millis(300))
            .await
            .expect_err("the lock is held");
        assert!(
            said.contains(&format!("server process {pid} ")),
            "{pid} in {said}"
        );
        unlock_template(&mut holder).await.unwrap();
        // Once let go, it is taken.
        lock_template(&mut waiter, Duration::from_secs(10))
            .await
            .unwrap();
        unlock_template(&mut waiter).await.unwrap();
    }
}
