//! The application's pool is the application's: handlers that hold all of it, nest acquires
//! through `ctx.step`, or leave a connection inside a transaction with a cancelled `begin()`
//! delay and corrupt none of the worker's own statements, which run on connections of its own.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use job::{Job, JobContext, JobError, JobId, JobOptions, JobState};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Acquire, Executor, PgPool, Row};

use crate::common::{enqueue, Harness, FAST_BACKOFF};
use crate::silence::Blackhole;

/// Executions per job, counted in the process.
#[derive(Clone, Default)]
pub struct Executions(Arc<Mutex<HashMap<JobId, u32>>>);

impl Executions {
    fn record(&self, id: JobId) {
        *self.0.lock().unwrap().entry(id).or_default() += 1;
    }

    fn of(&self, id: JobId) -> u32 {
        self.0.lock().unwrap().get(&id).copied().unwrap_or(0)
    }
}

/// Enqueues `n` jobs made by `make`, runs them with a worker over the application's pool `app`
/// (which the handlers use too) with `concurrency` slots, and checks that each completed on
/// its first attempt and ran once. Returns the worker's final counters.
async fn run_all_once<J: Job>(
    h: &Harness,
    app: &PgPool,
    n: usize,
    concurrency: usize,
    make: impl Fn() -> J,
) -> job::WorkerStats {
    let executions = Executions::default();
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(enqueue(&h.store, make()).await);
    }
    let worker = job::Worker::builder(job::PgStore::new(app.clone()))
        .register::<J>()
        .queue("default", concurrency)
        .poll_interval(Duration::from_millis(20))
        .state(app.clone())
        .state(executions.clone())
        .build()
        .unwrap()
        .start();
    for id in &ids {
        let row = h.reaches(*id, JobState::Completed).await;
        assert_eq!(row.attempt, 1, "job {id}: {:?}", row.errors);
        assert!(row.errors.is_empty(), "job {id}: {:?}", row.errors);
        assert_eq!(executions.of(*id), 1, "job {id} ran more than once");
    }
    worker.shutdown().await.stats
}

/// Holds a connection of the application's pool for `ms`, and records a durable step while it
/// holds it (a second, nested need for a connection).
#[derive(Debug, Serialize, Deserialize)]
pub struct HoldsConnection {
    pub ms: u64,
}

impl Job for HoldsConnection {
    const KIND: &'static str = "isolation.holds_connection";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_secs(1),
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Executions>()?.record(ctx.id());
        let mut held = ctx.state::<PgPool>()?.acquire().await?;
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        let conn: &mut sqlx::PgConnection = &mut held;
        let n: i64 = ctx
            .step("read", || async move {
                Ok(sqlx::query_scalar("SELECT 1::bigint")
                    .fetch_one(conn)
                    .await?)
            })
            .await?;
        assert_eq!(n, 1);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_holding_every_connection_of_a_tiny_pool_delay_no_lease() {
    let h = Harness::new().await;
    // The application's pool: two connections for sixteen slots of long holders.
    let app = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(120))
        .connect_with((*h.store.pool().connect_options()).clone())
        .await
        .unwrap();
    let stats = run_all_once(&h, &app, 200, 16, || HoldsConnection { ms: 20 }).await;
    assert_eq!(
        (stats.lease_lost, stats.fenced, stats.completed),
        (0, 0, 200)
    );
    app.close().await;
}

/// How often the cancelled `begin()` is tried on the guarded pool.
const TRIES: usize = 20;

/// Polls `future` once, then drops it: a `begin()` cancelled after its `BEGIN` was sent.
async fn poll_once_and_drop<F: Future>(future: F) {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        let _ = future.as_mut().poll(cx);
        Poll::Ready(())
    })
    .await;
}

/// Whether the session of `conn` is inside an open transaction block.
async fn in_transaction(conn: &mut sqlx::PgConnection) -> bool {
    conn.fetch_one(sqlx::raw_sql(
        "SELECT statement_timestamp() <> transaction_timestamp()",
    ))
    .await
    .unwrap()
    .get(0)
}

/// Gives a connection back to `pool` inside a transaction that sqlx does not know of, as a
/// cancelled `begin()` can.
async fn leave_in_a_transaction(pool: &PgPool) {
    let mut conn = pool.acquire().await.unwrap();
    conn.execute("BEGIN").await.unwrap();
}

/// Cancels a `begin()` on one connection of the pool, which may leave it inside a transaction
/// sqlx does not know of.
async fn cancel_a_begin(pool: &PgPool) {
    let mut conn = pool.acquire().await.unwrap();
    poll_once_and_drop(conn.begin()).await;
}

#[tokio::test]
async fn a_pool_from_pool_options_never_hands_out_a_connection_left_in_a_transaction() {
    let h = Harness::new().await;
    let options = (*h.store.pool().connect_options()).clone();
    // What a `begin()` dropped after its `BEGIN` went out leaves behind (sqlx issues 4385 and
    // 4393 upstream), made deterministic: a transaction sqlx does not know of. sqlx's own pool
    // hands that connection on as it is.
    let plain = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.clone())
        .await
        .unwrap();
    leave_in_a_transaction(&plain).await;
    let mut conn = plain.acquire().await.unwrap();
    assert!(in_transaction(&mut conn).await, "the control is poisoned");
    conn.close().await.unwrap();
    plain.close().await;

    let guarded = job::pool_options()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    leave_in_a_transaction(&guarded).await;
    let mut conn = guarded.acquire().await.unwrap();
    assert!(!in_transaction(&mut conn).await);
    drop(conn);
    // And the real thing, as often as it happens to leave the connection in a transaction.
    for _ in 0..TRIES {
        cancel_a_begin(&guarded).await;
        let mut conn = guarded.acquire().await.unwrap();
        assert!(!in_transaction(&mut conn).await);
    }
    sqlx::query("CREATE TABLE written (n int)")
        .execute(&guarded)
        .await
        .unwrap();
    let seen: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE tablename = 'written'")
            .fetch_one(h.store.pool())
            .await
            .unwrap();
    assert_eq!(seen, 1, "a write after the cancelled begin is committed");
    guarded.close().await;
}

/// Cancels a `begin()` on the application's pool, as a handler aborted mid-`begin` would.
#[derive(Debug, Serialize, Deserialize)]
pub struct CancelsBegin {}

impl Job for CancelsBegin {
    const KIND: &'static str = "isolation.cancels_begin";
    const OPTIONS: JobOptions = JobOptions {
        // Long enough that a loaded run's late heartbeat fences nothing (see `blocking.rs`).
        lease: Duration::from_millis(1500),
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Executions>()?.record(ctx.id());
        cancel_a_begin(ctx.state::<PgPool>()?).await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_that_leave_connections_in_a_transaction_corrupt_no_claim_or_outcome() {
    let h = Harness::new().await;
    // sqlx's plain pool, which hands such connections on.
    let app = PgPoolOptions::new()
        .max_connections(2)
        .connect_with((*h.store.pool().connect_options()).clone())
        .await
        .unwrap();
    let stats = run_all_once(&h, &app, 100, 4, || CancelsBegin {}).await;
    assert_eq!(
        (stats.claimed, stats.completed, stats.lease_lost),
        (100, 100, 0)
    );
    app.close().await;
}

/// Runs one trivial statement on `pool`, failing the test after `within`.
async fn answers(pool: &PgPool, within: Duration, what: &str) {
    match tokio::time::timeout(within, sqlx::query("SELECT 1").execute(pool)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("{what}: the statement failed: {e}"),
        Err(_) => panic!("{what}: no answer within {within:?}"),
    }
}

#[tokio::test]
async fn a_connection_that_goes_silent_never_keeps_its_pool_slot() {
    let h = Harness::new().await;
    let hole = Blackhole::start(&h.store.pool().connect_options()).await;
    // One slot, and an acquire that would wait far longer than the test.
    let pool = job::pool_options()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(300))
        .connect_lazy_with(hole.options());
    let within = job::POOL_CHECK_TIMEOUT * 3;
    answers(&pool, within, "before any silence").await;

    // A caller gives up on a statement that will never be answered (the worker bounds its
    // calls). sqlx checks the connection as it comes back, and waited on it for ever.
    hole.silence();
    let gave_up = tokio::time::timeout(
        Duration::from_millis(200),
        sqlx::query("SELECT 1").execute(&pool),
    )
    .await;
    assert!(gave_up.is_err(), "a silent connection answered");
    answers(&pool, within, "after giving up on a silent connection").await;

    // An idle connection that went silent: sqlx checks it as it is taken out, and waited on it
    // until the acquire timed out. (Given back in the background: wait until it is idle.)
    let started = tokio::time::Instant::now();
    while pool.num_idle() == 0 {
        assert!(
            started.elapsed() < within,
            "the connection never became idle"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    hole.silence();
    answers(&pool, within, "after an idle connection went silent").await;
    pool.close().await;
}

#[tokio::test]
async fn a_statement_given_up_on_a_slow_connection_does_not_run_on_at_the_server() {
    // A connection given up on may be slow rather than silent: its statement still runs. The
    // pool closes it after POOL_CHECK_TIMEOUT and opens another; the server must end the
    // statement then, or every give-up would leave one more backend running (holding its
    // locks) beyond the pool's size.
    let h = Harness::new().await;
    let pool = job::pool_options()
        .max_connections(1)
        .connect_with((*h.store.pool().connect_options()).clone())
        .await
        .unwrap();
    let running = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND query LIKE '%given up on purpose%'
               AND pid <> pg_backend_pid()",
        )
        .fetch_one(h.store.pool())
        .await
        .unwrap()
    };
    let gave_up = tokio::time::timeout(
        Duration::from_millis(200),
        sqlx::query("SELECT pg_sleep(120) -- given up on purpose").execute(&pool),
    )
    .await;
    assert!(gave_up.is_err(), "the sleep returned");
    assert_eq!(running().await, 1, "the statement runs at the server");
    // The pool's one slot comes back (closing the connection)...
    answers(
        &pool,
        job::POOL_CHECK_TIMEOUT * 3,
        "after giving up on a slow statement",
    )
    .await;
    // ...and the server ends the statement whose client has gone.
    let started = tokio::time::Instant::now();
    while running().await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the given-up statement still runs at the server"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pool.close().await;
}

#[tokio::test]
async fn a_pool_options_session_asks_the_server_to_end_it_when_its_client_is_gone() {
    // A client cut off inside a transaction (a host gone, a flow a firewall dropped) left it
    // open at the server, holding its row locks, for the system's TCP keepalive: 2 hours.
    // And a statement given up on ran on (see the test above). Over TCP, as here.
    let h = Harness::new().await;
    let pool = job::pool_options()
        .max_connections(1)
        .connect_with((*h.store.pool().connect_options()).clone())
        .await
        .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    for (setting, value) in [
        ("client_connection_check_interval", "1s"),
        ("tcp_keepalives_idle", "10"),
        ("tcp_keepalives_interval", "5"),
        ("tcp_keepalives_count", "3"),
        ("tcp_user_timeout", "25000"),
    ] {
        let shown: String = sqlx::query_scalar(&format!("SHOW {setting}"))
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(shown, value, "{setting}");
    }
    drop(conn);
    pool.close().await;
    // The worker's own sessions, whose transactions never wait between statements, also end
    // one left idle (a worker stopped or cut off inside it, holding its locks).
    let own = job::Store::dedicated(&h.store, "job worker", 1);
    let shown: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
        .fetch_one(own.pool())
        .await
        .unwrap();
    assert_eq!(shown, "30s");
    job::Store::close(&own).await;
}
