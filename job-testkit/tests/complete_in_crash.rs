//! A handler that charges a payment and completes its job in the same transaction
//! (`complete_in`), with a crash injected after the finalize: the charge happens once, the job
//! ends completed at attempt 1, and the crash fires, on either store. The worker learns of
//! that commit from whichever sees it first: its completer (the outcome the handler returns
//! finds the job finished) or its lease keeper (a heartbeat finds the lease gone and the row
//! finished while the handler's code after its commit still runs). The point after finalize
//! fired only in the first case: an application's crash test failed in 1 of 9 loaded runs.

use std::sync::Arc;
use std::time::Duration;

use job_core::{
    BoxFuture, Breaker, Call, FaultPoint, Job, JobContext, JobError, JobId, JobOptions, JobState,
    Layered, NewJob, Returned, Store, StoreError, StoreLayer, Worker, WorkerBuilder, WorkerStats,
};
use job_testkit::{
    wait_for, Crash, Faults, Point, TestDb, TestSqlite, TestStore, TestWorker, WAIT,
};
use tokio::sync::watch;

/// Charges order `order` and completes the job in the same transaction, on whichever pool
/// the worker's state holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Charge {
    order: i64,
}

impl Job for Charge {
    const KIND: &'static str = "charge";
    // A breaker that never trips here: its counts show every ended attempt was counted.
    const OPTIONS: JobOptions = JobOptions {
        breaker: Some(Breaker {
            failure_percent: 100,
            min_attempts: 1_000_000,
            window: Duration::from_secs(3600),
            cool_down: Duration::from_secs(60),
        }),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        if let Ok(pool) = ctx.state::<sqlx::PgPool>() {
            let mut tx = pool.begin().await?;
            sqlx::query("INSERT INTO payments (order_id) VALUES ($1)")
                .bind(self.order)
                .execute(&mut *tx)
                .await?;
            job_postgres::complete_in(&mut tx, &ctx).await?;
            tx.commit().await?;
        } else {
            let pool = ctx.state::<sqlx::SqlitePool>()?;
            let mut tx = pool.begin().await?;
            sqlx::query("INSERT INTO payments (order_id) VALUES (?1)")
                .bind(self.order)
                .execute(&mut *tx)
                .await?;
            job_sqlite::complete_in(&mut tx, &ctx).await?;
            tx.commit().await?;
        }
        // The code after the commit (a message published, a log line): when the test says
        // so, it runs until the lease keeper has found the commit, or until it is stopped.
        if let Ok(keeper) = ctx.state::<KeeperSees>() {
            keeper.has_moved_on().await?;
        }
        if ctx.state::<HangAfterCommit>().is_ok() {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

/// Makes the charge's code after its commit run until the worker stops it.
#[derive(Clone, Copy)]
struct HangAfterCommit;

/// Keeps one lease held, so the lease keeper goes on beating, until the keeper has found the
/// charge's commit, and then until the shutdown, which it answers with an error: a stopped
/// execution's, given back, never an outcome for the completer to write (so that nothing but
/// the completer's last look at shutdown adds the charge's success to its breaker).
#[derive(serde::Serialize, serde::Deserialize)]
struct Hold {}

impl Job for Hold {
    const KIND: &'static str = "hold";

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let keeper = ctx.state::<KeeperSees>()?;
        tokio::select! {
            moved_on = keeper.has_moved_on() => moved_on?,
            () = ctx.cancelled() => {}
        }
        ctx.cancelled().await;
        Err(JobError::retryable("stopped by the shutdown"))
    }
}

/// A layer over the worker's store that tells when the lease keeper has found a finished job
/// behind a lost lease and acted on it. The keeper reads the job's row (`get`, which nothing
/// else of this worker calls) when a heartbeat reports a lease lost whose handler completed
/// the job in its own transaction, and marks the execution finished by its handler right after
/// that read: a heartbeat sent once the read has returned belongs to a later beat, after the
/// mark.
#[derive(Clone)]
struct KeeperSees {
    read: Arc<std::sync::atomic::AtomicBool>,
    moved_on: watch::Sender<bool>,
}

impl KeeperSees {
    fn new() -> Self {
        KeeperSees {
            read: Arc::default(),
            moved_on: watch::Sender::new(false),
        }
    }

    async fn has_moved_on(&self) -> Result<(), JobError> {
        let mut moved_on = self.moved_on.subscribe();
        let seen = tokio::time::timeout(WAIT, moved_on.wait_for(|m| *m))
            .await
            .is_ok_and(|seen| seen.is_ok());
        if seen {
            Ok(())
        } else {
            Err(JobError::terminal(format!(
                "the lease keeper did not find the commit within {WAIT:?}"
            )))
        }
    }
}

impl StoreLayer for KeeperSees {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        use std::sync::atomic::Ordering;
        Box::pin(async move {
            if call.name == "heartbeat" && self.read.load(Ordering::SeqCst) {
                self.moved_on.send_replace(true);
            }
            let answer = run.await;
            if call.name == "get" {
                self.read.store(true, Ordering::SeqCst);
            }
            answer
        })
    }
}

/// The application's side of a test: its pool, where the charges go.
#[derive(Clone)]
enum App {
    Pg(sqlx::PgPool),
    Sqlite(sqlx::SqlitePool),
}

impl App {
    async fn with_payments(self) -> Self {
        let create = "CREATE TABLE payments (order_id BIGINT NOT NULL)";
        match &self {
            App::Pg(pool) => sqlx::query(create).execute(pool).await.map(drop),
            App::Sqlite(pool) => sqlx::query(create).execute(pool).await.map(drop),
        }
        .expect("create the payments table");
        self
    }

    fn state<S: Store>(&self, worker: WorkerBuilder<S>) -> WorkerBuilder<S> {
        match self {
            App::Pg(pool) => worker.state(pool.clone()),
            App::Sqlite(pool) => worker.state(pool.clone()),
        }
    }

    /// The attempts of kind `charge` its circuit breaker has counted.
    async fn breaker_attempts(&self) -> i64 {
        match self {
            App::Pg(pool) => {
                sqlx::query_scalar(
                    "SELECT coalesce(sum(attempts), 0)::bigint FROM job.breakers
                     WHERE kind = 'charge'",
                )
                .fetch_one(pool)
                .await
            }
            App::Sqlite(pool) => {
                sqlx::query_scalar(
                    "SELECT coalesce(sum(attempts), 0) FROM job_breakers WHERE kind = 'charge'",
                )
                .fetch_one(pool)
                .await
            }
        }
        .expect("read the breaker's counts")
    }

    async fn charges(&self, order: i64) -> i64 {
        match self {
            App::Pg(pool) => {
                sqlx::query_scalar("SELECT count(*) FROM payments WHERE order_id = $1")
                    .bind(order)
                    .fetch_one(pool)
                    .await
            }
            App::Sqlite(pool) => {
                sqlx::query_scalar("SELECT count(*) FROM payments WHERE order_id = ?1")
                    .bind(order)
                    .fetch_one(pool)
                    .await
            }
        }
        .expect("count the charges")
    }
}

/// Charges order 7 on a worker that crashes the charge after its finalize, and checks what
/// the application sees: one charge, the job completed at its first attempt with no error,
/// and the crash fired there. With `keeper_first`, the handler's code after its commit runs
/// until the lease keeper has found that commit.
async fn charged_once_with_a_crash_after_finalize<S: TestStore>(
    store: S,
    app: App,
    keeper_first: bool,
) {
    let app = app.with_payments().await;
    let keeper = KeeperSees::new();
    let id = store
        .enqueue(NewJob::new("charge", r#"{"order": 7}"#))
        .await
        .unwrap();
    let faults = Faults::new()
        .crash_after(Point::Finalize)
        .kind::<Charge>()
        .times(1)
        .rescue_at_once(&store);
    let mut worker = app
        .state(Worker::builder(Layered::new(store.clone(), keeper.clone())))
        .register::<Charge>()
        .queue("default", 2)
        .faults(faults.clone())
        .for_tests();
    if keeper_first {
        store.enqueue(NewJob::new("hold", "{}")).await.unwrap();
        worker = worker.register::<Hold>().state(keeper);
    }
    let worker = worker.build().unwrap().start();
    let row = wait_for(&store, id, JobState::Completed).await;
    // The row shows the commit before the worker has seen it: the crash after the finalize
    // has happened once the worker is shut down, not before.
    let stats = worker.shutdown().await.stats;
    assert_eq!(app.charges(7).await, 1, "charged once");
    assert_eq!(
        (row.attempt, row.errors.len()),
        (1, 0),
        "completed at its first attempt: {:?}",
        row.errors
    );
    completed_once_and_crashed_after_finalize(&app, &faults, id, &stats).await;
}

/// What every test here checks once the worker is shut down: the crash after the finalize
/// fired once, the worker counted the job completed once, and the kind's breaker counted the
/// success, whoever saw the commit (the keeper's path counted none, and a breaker saw only a
/// kind's failures).
async fn completed_once_and_crashed_after_finalize(
    app: &App,
    faults: &Faults,
    id: JobId,
    stats: &WorkerStats,
) {
    assert_eq!(
        faults.crashes(),
        [Crash {
            point: FaultPoint::AfterFinalize,
            job: id,
            attempt: 1,
            step: None,
        }],
        "the crash after the finalize fired, once (worker counted {} completed, {} crashed)",
        stats.completed,
        stats.crashed
    );
    assert_eq!(stats.completed, 1);
    assert_eq!(
        app.breaker_attempts().await,
        1,
        "the breaker counted the success"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_completed_in_its_transaction_and_crashed_after_finalize_is_charged_once_on_postgres(
) {
    let db = TestDb::new().await;
    charged_once_with_a_crash_after_finalize(db.store(), App::Pg(db.pool()), false).await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_completed_in_its_transaction_and_crashed_after_finalize_is_charged_once_on_sqlite(
) {
    let db = TestSqlite::new().await;
    charged_once_with_a_crash_after_finalize(db.store(), App::Sqlite(db.pool()), false).await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crash_after_finalize_fires_when_the_lease_keeper_finds_the_commit_first_on_postgres() {
    let db = TestDb::new().await;
    charged_once_with_a_crash_after_finalize(db.store(), App::Pg(db.pool()), true).await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crash_after_finalize_fires_when_the_lease_keeper_finds_the_commit_first_on_sqlite() {
    let db = TestSqlite::new().await;
    charged_once_with_a_crash_after_finalize(db.store(), App::Sqlite(db.pool()), true).await;
    db.close().await;
}

/// The charge's code after its commit runs until the shutdown's drain stops it, before the
/// lease keeper (beating every 20 s here) has seen the commit: the job is counted completed,
/// for its breaker too, and the crash after finalize fires. Before, the stopped execution was
/// given back as unfinished: counted nowhere, the point never asked, and its release found no
/// lease.
async fn stopped_by_the_drain_after_its_commit<S: TestStore>(store: S, app: App) {
    let app = app.with_payments().await;
    let id = store
        .enqueue(NewJob::new("charge", r#"{"order": 7}"#))
        .await
        .unwrap();
    let faults = Faults::new()
        .crash_after(Point::Finalize)
        .kind::<Charge>()
        .times(1);
    let worker = app
        .state(Worker::builder(store.clone()))
        .register::<Charge>()
        .queue("default", 1)
        .faults(faults.clone())
        .state(HangAfterCommit)
        .drain_timeout(Duration::from_millis(100))
        .configure(|c| {
            c.lease = Some(Duration::from_secs(60));
            c.heartbeat_interval = Some(Duration::from_secs(20));
        })
        .build()
        .unwrap()
        .start();
    wait_for(&store, id, JobState::Completed).await;
    let stats = worker.shutdown().await.stats;
    assert_eq!(app.charges(7).await, 1, "charged once");
    completed_once_and_crashed_after_finalize(&app, &faults, id, &stats).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_whose_code_after_its_commit_the_drain_stops_is_counted_completed_on_postgres() {
    let db = TestDb::new().await;
    stopped_by_the_drain_after_its_commit(db.store(), App::Pg(db.pool())).await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_whose_code_after_its_commit_the_drain_stops_is_counted_completed_on_sqlite() {
    let db = TestSqlite::new().await;
    stopped_by_the_drain_after_its_commit(db.store(), App::Sqlite(db.pool())).await;
    db.close().await;
}
