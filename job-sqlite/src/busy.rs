//! The busy handler of every connection the store opens: how a writer waits for the file's
//! write lock while another process holds it.
//!
//! SQLite's own handler (`sqlite3_busy_timeout`, what sqlx's `busy_timeout` sets) sleeps 1, 2,
//! 5, 10, 15, 20, 25, 25, 25, 50, 50, 100 ms and then 100 ms at a time between its tries. A
//! process writing back to back (1-2 ms transactions, 10-50 µs between them) leaves the lock
//! free only in those gaps, which such sleeps almost never end in: a write of another process
//! every 0.5 s waited a median of 0.4-1.0 s and up to 9.2 s (of its 10 s) for the lock, and a
//! heartbeat that waits that long can lose its lease. This handler tries again every
//! [`FIRST_STEP`] for the first [`FIRST_PHASE`] of a wait and every [`LATER_STEP`] after that,
//! and gives up, as SQLite's would, once the connection's busy timeout has passed: the
//! statement then fails with `SQLITE_BUSY` ("database is locked"). With it, the same writes
//! waited a median of 7-18 ms, and at most 62 ms to 1.0 s (on two cores, one taken by the
//! other process and the other shared with a build).
//!
//! Hand-written on `libsqlite3-sys` (the very library sqlx links: `links = "sqlite3"` lets
//! cargo build one copy only), with one `unsafe` call: sqlx offers only `busy_timeout`
//! (SQLite's handler), and no crate installs a busy handler on a connection it did not open
//! (rusqlite's `Connection::busy_handler` is for its own connections, and would bring a second
//! driver for one call).

use std::cell::Cell;
use std::os::raw::{c_int, c_void};
use std::time::{Duration, Instant};

use sqlx::SqliteConnection;

/// How long a wait sleeps between its tries at first.
const FIRST_STEP: Duration = Duration::from_micros(200);

/// How long a wait tries every [`FIRST_STEP`] before it tries every [`LATER_STEP`].
const FIRST_PHASE: Duration = Duration::from_millis(50);

/// How long a wait sleeps between its tries once [`FIRST_PHASE`] has passed.
const LATER_STEP: Duration = Duration::from_millis(1);

thread_local! {
    /// When the wait under way on this thread began. SQLite calls the handler on the thread
    /// running the statement (sqlx's worker thread of the connection), which it blocks until
    /// the handler returns, so one thread waits for one lock at a time; each wait begins with
    /// a call whose count is 0.
    static WAIT_BEGAN: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// How many times the handler was called, by busy timeout (milliseconds), for the tests: a
/// test gives its store a timeout of its own and sees its writes wait here.
#[cfg(test)]
static CALLS: std::sync::Mutex<Vec<(usize, u64)>> = std::sync::Mutex::new(Vec::new());

/// How many times the handler of connections with a busy timeout of `timeout_ms` was called.
#[cfg(test)]
pub(crate) fn calls(timeout_ms: usize) -> u64 {
    let calls = CALLS.lock().unwrap();
    calls.iter().find(|c| c.0 == timeout_ms).map_or(0, |c| c.1)
}

/// Replaces SQLite's busy handler of `conn` with [`handler`], giving up after the busy timeout
/// the connection was opened with (its `PRAGMA busy_timeout`: [`crate::BUSY_TIMEOUT`] with
/// [`SqliteStore::options`](crate::SqliteStore::options), or what the options given to
/// [`SqliteStore::connect_with`](crate::SqliteStore::connect_with) say). After it, `PRAGMA
/// busy_timeout` reads 0 (SQLite's own handler is off); setting it again would put SQLite's
/// handler back.
pub(crate) async fn install(conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
    let timeout_ms: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(&mut *conn)
        .await?;
    // The timeout is the handler's argument itself, never dereferenced: nothing is allocated
    // per connection, so nothing is left to free when it closes.
    let timeout_ms = usize::try_from(timeout_ms.max(0)).unwrap_or(usize::MAX);
    let mut handle = conn.lock_handle().await?;
    let db = handle.as_raw_handle().as_ptr();
    let arg = timeout_ms as *mut c_void;
    // SAFETY: `db` is the connection's open handle, locked out of its worker thread for the
    // call (`lock_handle`), so no statement runs on it meanwhile; `handler` is a plain function
    // that never unwinds and never reads through `arg`.
    let rc = unsafe { libsqlite3_sys::sqlite3_busy_handler(db, Some(handler), arg) };
    if rc != libsqlite3_sys::SQLITE_OK {
        return Err(sqlx::Error::Protocol(format!(
            "sqlite3_busy_handler failed (code {rc})"
        )));
    }
    Ok(())
}

/// SQLite's busy handler: `count` is how many times it was called before in this wait, `arg`
/// the busy timeout in milliseconds. Sleeps and returns 1 (try again), or returns 0 (give up:
/// `SQLITE_BUSY`) once the timeout has passed since the wait began.
extern "C" fn handler(arg: *mut c_void, count: c_int) -> c_int {
    #[cfg(test)]
    {
        let mut calls = CALLS.lock().unwrap_or_else(|e| e.into_inner());
        match calls.iter_mut().find(|c| c.0 == arg as usize) {
            Some(c) => c.1 += 1,
            None => calls.push((arg as usize, 1)),
        }
    }
    let timeout = Duration::from_millis(u64::try_from(arg as usize).unwrap_or(u64::MAX));
    let now = Instant::now();
    // `try_with` fails only while the thread is being torn down: the wait then counts from now.
    let began = WAIT_BEGAN
        .try_with(|began| match began.get() {
            Some(t) if count > 0 => t,
            _ => {
                began.set(Some(now));
                now
            }
        })
        .unwrap_or(now);
    match next_sleep(now.saturating_duration_since(began), timeout) {
        Some(sleep) => {
            std::thread::sleep(sleep);
            1
        }
        None => 0,
    }
}

/// How long a wait that began `waited` ago sleeps before its next try, or `None` to give up.
fn next_sleep(waited: Duration, timeout: Duration) -> Option<Duration> {
    let left = timeout.checked_sub(waited).filter(|l| !l.is_zero())?;
    let step = if waited < FIRST_PHASE {
        FIRST_STEP
    } else {
        LATER_STEP
    };
    Some(step.min(left))
}

#[cfg(test)]
mod tests {
    use job_core::{NewJob, Store};
    use sqlx::sqlite::SqliteConnectOptions;
    use sqlx::{ConnectOptions, Connection};

    use super::*;
    use crate::lease::tests::plan_store;
    use crate::SqliteStore;

    #[test]
    fn a_wait_tries_often_at_first_then_less_and_gives_up_at_its_timeout() {
        let ten = Duration::from_secs(10);
        let ms = Duration::from_millis;
        assert_eq!(next_sleep(Duration::ZERO, ten), Some(FIRST_STEP));
        assert_eq!(next_sleep(ms(49), ten), Some(FIRST_STEP));
        assert_eq!(next_sleep(ms(50), ten), Some(LATER_STEP));
        assert_eq!(next_sleep(ms(9_000), ten), Some(LATER_STEP));
        // The last sleep ends at the timeout, and the try after it is the last.
        assert_eq!(
            next_sleep(ten - Duration::from_micros(300), ten),
            Some(Duration::from_micros(300))
        );
        assert_eq!(next_sleep(ten, ten), None);
        assert_eq!(next_sleep(ms(10_001), ten), None);
        assert_eq!(next_sleep(Duration::ZERO, Duration::ZERO), None);
    }

    #[test]
    fn the_handler_gives_up_at_once_with_no_timeout_and_tries_again_within_one() {
        // The argument is the timeout in milliseconds.
        assert_eq!(handler(std::ptr::null_mut(), 0), 0);
        assert_eq!(handler(10_000usize as *mut c_void, 0), 1);
        assert_eq!(handler(10_000usize as *mut c_void, 1), 1);
    }

    /// A store on a fresh file whose connections' busy timeout is `timeout_ms`: a test's own,
    /// so that [`calls`] counts its waits only.
    async fn store_timing_out_after(
        name: &str,
        timeout_ms: u64,
    ) -> (std::path::PathBuf, SqliteStore) {
        let (dir, store) = plan_store(name).await;
        store.pool().close().await;
        let store = SqliteStore::connect_with(
            SqliteStore::options(store.path()).busy_timeout(Duration::from_millis(timeout_ms)),
        )
        .await
        .unwrap();
        (dir, store)
    }

    /// A connection of its own on the store's file with SQLite's handler off (busy timeout 0),
    /// holding the write lock.
    async fn hold_the_write_lock(store: &SqliteStore) -> sqlx::SqliteConnection {
        let mut other = SqliteConnectOptions::new()
            .filename(store.path())
            .busy_timeout(Duration::ZERO)
            .connect()
            .await
            .unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut other)
            .await
            .unwrap();
        other
    }

    #[tokio::test]
    async fn every_connection_of_every_pool_of_the_store_waits_in_this_handler() {
        const TIMEOUT_MS: u64 = 29_011;
        let (dir, store) = store_timing_out_after("busy", TIMEOUT_MS).await;
        let dedicated = store.dedicated("test", 2);
        // Every connection at once, so that each is a different one.
        let mut conns = Vec::new();
        for _ in 0..8 {
            conns.push(store.pool().acquire().await.unwrap());
        }
        conns.push(dedicated.pool().acquire().await.unwrap());
        for conn in &mut conns {
            // SQLite's own handler is off: installing another one sets its timeout to 0.
            let timeout: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
                .fetch_one(&mut **conn)
                .await
                .unwrap();
            assert_eq!(timeout, 0, "SQLite's own busy handler still waits");
        }
        drop(conns);

        // A write of the store waits for another connection's lock in this handler, and goes
        // through once the lock is given back.
        let mut other = hold_the_write_lock(&store).await;
        let write = tokio::spawn({
            let store = store.clone();
            async move { store.enqueue(NewJob::new("k", "{}")).await }
        });
        // A deadline only, so that a write not waiting here fails the test instead of
        // hanging it: nothing is measured.
        let waiting = tokio::time::timeout(Duration::from_secs(20), async {
            while calls(TIMEOUT_MS as usize) < 3 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        assert!(
            waiting.is_ok(),
            "the write never waited in the store's handler"
        );
        assert!(!write.is_finished());
        sqlx::query("COMMIT").execute(&mut other).await.unwrap();
        write
            .await
            .unwrap()
            .expect("the write goes through once the lock is free");
        other.close().await.unwrap();
        dedicated.close().await;
        store.pool().close().await;
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn the_handler_gives_up_after_the_connections_busy_timeout_as_busy() {
        const TIMEOUT_MS: u64 = 103;
        let (dir, store) = store_timing_out_after("busy-timeout", TIMEOUT_MS).await;
        let mut other = hold_the_write_lock(&store).await;
        // A deadline only, so that a handler that never gives up fails the test.
        let write = tokio::time::timeout(
            Duration::from_secs(30),
            store.enqueue(NewJob::new("k", "{}")),
        )
        .await
        .expect("the handler gave up");
        let e = write.expect_err("the lock was never free");
        assert!(e.to_string().contains("database is locked"), "{e}");
        assert!(calls(TIMEOUT_MS as usize) > 0, "it waited in the handler");
        sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
        other.close().await.unwrap();
        store.pool().close().await;
        std::fs::remove_dir_all(dir).unwrap();
    }
}
