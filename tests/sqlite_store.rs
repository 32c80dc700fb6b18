//! SQLite specifics: the `#[job]` helpers and the typed builders through a SQLite
//! transaction (the job commits or rolls back with the caller's rows), in-process wake-ups on
//! commit only, completing a job in the handler's own transaction, and several processes'
//! stores on one file. The contract itself is in `tests/conformance_sqlite.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use job::prelude::*;
use job::{ClaimKind, ClaimRequest, NewJob, Renewal, SqlitePool, SqliteStore};
use job_testkit::{wait_for, TestSqlite};
use tokio::sync::mpsc::error::TryRecvError;

/// Sends an invoice (records that it ran); its result is the number of the email sent.
#[job(queue = "mail")]
async fn send_invoice(ctx: JobContext, invoice_id: i64) -> Result<i64, JobError> {
    ctx.state::<Arc<AtomicUsize>>()?
        .fetch_add(1, Ordering::SeqCst);
    Ok(invoice_id * 100)
}

/// Ships an order: writes its row and completes the job in the same transaction.
#[job(queue = "ship")]
async fn ship(ctx: JobContext, order: i64) -> Result<(), JobError> {
    let pool = ctx.state::<SqlitePool>()?;
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query("INSERT INTO shipments (order_id, job_id) VALUES (?1, ?2)")
        .bind(order)
        .bind(ctx.id())
        .execute(&mut *tx)
        .await?;
    ctx.set_result(&serde_json::json!({ "shipped": order }))?;
    job::sqlite::complete_in(&mut tx, &ctx).await?;
    tx.commit().await?;
    Ok(())
}

async fn orders(pool: &SqlitePool) {
    sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        .execute(pool)
        .await
        .unwrap();
}

async fn count(pool: &SqlitePool, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_typed_helper_enqueues_inside_a_sqlite_transaction_that_commits() {
    let db = TestSqlite::new().await;
    let store = db.store();
    orders(store.pool()).await;
    let mut tx = store.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    sqlx::query("INSERT INTO orders (id) VALUES (7)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let id = SendInvoice { invoice_id: 7 }
        .enqueue(&mut *tx)
        .await
        .unwrap();
    let by_builder = Enqueue::new(SendInvoice { invoice_id: 8 })
        .priority(3)
        .enqueue(&mut *tx)
        .await
        .unwrap();
    assert_eq!(store.get(id).await.unwrap(), None, "visible before commit");
    tx.commit().await.unwrap();
    let row = store
        .get(id)
        .await
        .unwrap()
        .expect("committed with the order");
    assert_eq!(
        (row.queue.as_str(), row.state),
        ("mail", JobState::Available)
    );
    assert_eq!(store.get(by_builder).await.unwrap().unwrap().priority, 3);
    assert_eq!(count(store.pool(), "orders").await, 1);
    db.close().await;
}

#[tokio::test]
async fn a_rolled_back_sqlite_transaction_leaves_neither_the_row_nor_the_job_nor_a_wake_up() {
    let db = TestSqlite::new().await;
    let store = db.store();
    orders(store.pool()).await;
    let mut wakeups = store.listen().await.unwrap();
    let mut tx = store.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    sqlx::query("INSERT INTO orders (id) VALUES (7)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let id = SendInvoice { invoice_id: 7 }
        .enqueue(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(store.get(id).await.unwrap(), None);
    assert_eq!(count(store.pool(), "orders").await, 0);
    // The hooks run on the connection before commit or rollback returns: a wake-up would be
    // here already.
    assert_eq!(wakeups.try_recv(), Err(TryRecvError::Empty));

    SendInvoice { invoice_id: 8 }
        .enqueue(store.pool())
        .await
        .unwrap();
    assert_eq!(wakeups.try_recv(), Ok(job::sqlite::EVERY_QUEUE.to_owned()));
    db.close().await;
}

#[tokio::test]
async fn a_worker_on_sqlite_runs_what_the_typed_helper_enqueued() {
    let db = TestSqlite::new().await;
    let store = db.store();
    let ran = Arc::new(AtomicUsize::new(0));
    let id = SendInvoice { invoice_id: 1 }
        .enqueue(store.pool())
        .await
        .unwrap();
    let worker = Worker::builder(store.clone())
        .register::<SendInvoice>()
        .queue("mail", 2)
        .state(ran.clone())
        .build()
        .unwrap()
        .start();
    wait_for(&store, id, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    db.close().await;
}

#[tokio::test]
async fn complete_in_commits_the_handlers_row_and_the_completion_together() {
    let db = TestSqlite::new().await;
    let store = db.store();
    sqlx::query("CREATE TABLE shipments (order_id INTEGER, job_id INTEGER)")
        .execute(store.pool())
        .await
        .unwrap();
    let id = Ship { order: 5 }.enqueue(store.pool()).await.unwrap();
    let worker = Worker::builder(store.clone())
        .register::<Ship>()
        .queue("ship", 1)
        .state(store.pool().clone())
        .build()
        .unwrap()
        .start();
    let row = wait_for(&store, id, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(row.attempt, 1);
    assert_eq!(row.errors, vec![]);
    assert_eq!(count(store.pool(), "shipments").await, 1);
    assert_eq!(worker_lease_lost(&row), 0);
    assert_eq!(row.result, Some(serde_json::json!({ "shipped": 5 })));
    db.close().await;
}

/// A completion in the handler's transaction is the job's only finalize: nothing about a lost
/// lease was recorded (the worker's own finalize found the job done and said nothing).
fn worker_lease_lost(row: &JobRow) -> usize {
    row.errors
        .iter()
        .filter(|e| e.class == "lease_expired")
        .count()
}

#[tokio::test]
async fn two_stores_on_one_file_see_each_others_jobs() {
    let db = TestSqlite::new().await;
    let other = SqliteStore::open(db.path()).await.unwrap();
    let id = SendInvoice { invoice_id: 1 }
        .enqueue(db.store().pool())
        .await
        .unwrap();
    let claimed = other
        .claim(&job::ClaimRequest {
            queue: "mail".into(),
            kinds: vec![job::ClaimKind {
                kind: SendInvoice::KIND.into(),
                max_version: 1,
                lease: std::time::Duration::from_secs(30),
                concurrency: None,
                rate: None,
            }],
            limit: 10,
            worker_id: "other".into(),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].lease.id, id);
    other.pool().close().await;
    db.close().await;
}

#[tokio::test]
async fn the_testkits_drain_runs_due_and_scheduled_jobs_on_sqlite() {
    let db = TestSqlite::new().await;
    let store = db.store();
    let now = SendInvoice { invoice_id: 1 }
        .enqueue(store.pool())
        .await
        .unwrap();
    let later = SendInvoice { invoice_id: 2 }
        .schedule_in(std::time::Duration::from_secs(3600))
        .enqueue(store.pool())
        .await
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let drain = job_testkit::Drain::new()
        .register::<SendInvoice>()
        .state(ran.clone());
    let first = drain.run(&store, "mail").await;
    assert_eq!(first.iter().map(|d| d.id).collect::<Vec<_>>(), vec![now]);
    assert_eq!(first[0].outcome, Outcome::Complete);
    assert_eq!(first[0].result, Some(serde_json::json!(100)));
    assert_eq!(
        store.get(now).await.unwrap().unwrap().result,
        Some(serde_json::json!(100)),
        "the function's return value, stored as the job's result"
    );
    let rest = drain.with_scheduled(true).run(&store, "mail").await;
    assert_eq!(rest.iter().map(|d| d.id).collect::<Vec<_>>(), vec![later]);
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    assert_eq!(
        store.get(later).await.unwrap().unwrap().state,
        JobState::Completed
    );
    db.close().await;
}

#[tokio::test]
async fn the_enqueue_assertions_read_a_sqlite_pool_and_an_open_sqlite_transaction() {
    let db = TestSqlite::new().await;
    let store = db.store();
    let mut tx = store.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    let id = SendInvoice { invoice_id: 42 }
        .enqueue(&mut *tx)
        .await
        .unwrap();
    let seen = job_testkit::assert_enqueued::<SendInvoice>(
        &mut *tx,
        serde_json::json!({ "invoice_id": 42 }),
    )
    .await;
    assert_eq!(seen, id);
    tx.commit().await.unwrap();
    job_testkit::refute_enqueued::<SendInvoice>(
        store.pool(),
        serde_json::json!({ "invoice_id": 7 }),
    )
    .await;
    let expected = job_testkit::Expect::args(serde_json::json!({ "invoice_id": 42 })).queue("mail");
    assert_eq!(
        job_testkit::assert_enqueued_with::<SendInvoice>(store.pool(), expected).await,
        id
    );
    let all = job_testkit::enqueued::<SendInvoice>(store.pool()).await;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].job.invoice_id, 42);
    db.close().await;
}

/// sqlx sends `BEGIN IMMEDIATE` and then awaits once more before it hands out the
/// transaction: a caller dropped in between (a timeout, a `select!`, a handler aborted by its
/// lease or its timeout) leaves the connection inside a write transaction that nothing will
/// end. Given back to the pool, that connection would keep SQLite's write lock until it
/// closed, and every write of every process would fail as busy meanwhile. The store's pools
/// close such a connection as it comes back instead.
#[tokio::test]
async fn a_begin_cancelled_at_any_point_never_keeps_the_write_lock() {
    use std::future::Future;
    use std::task::Poll;
    use std::time::Duration;

    let db = TestSqlite::new().await;
    let store = db.store();
    for i in 0..400u64 {
        let mut begin = Box::pin(store.pool().begin_with("BEGIN IMMEDIATE"));
        // Cancel after a few polls, a few microseconds apart: over the iterations that lands
        // on every await of the begin, including the one after SQLite has begun.
        for _ in 0..1 + i % 4 {
            let ready =
                std::future::poll_fn(|cx| Poll::Ready(begin.as_mut().poll(cx).is_ready())).await;
            if ready {
                break;
            }
            std::thread::sleep(Duration::from_micros(i % 50 * 4));
        }
        drop(begin);
        // A write through the same pool, as the next borrower would make it.
        let written = tokio::time::timeout(
            Duration::from_secs(5),
            SendInvoice {
                invoice_id: i64::try_from(i).unwrap(),
            }
            .enqueue(store.pool()),
        )
        .await;
        assert!(
            matches!(written, Ok(Ok(_))),
            "a write after a begin cancelled at iteration {i}: {written:?}"
        );
    }
    assert_eq!(count(store.pool(), "job_jobs").await, 400);
    db.close().await;
}

#[tokio::test]
async fn a_stored_value_serde_cannot_read_back_is_shown_as_its_text() {
    // A raw write can store JSON nested deeper than serde_json reads (128 levels): the row,
    // and every listing that holds it, must still read.
    let db = TestSqlite::new().await;
    let store = db.store();
    let id = SendInvoice { invoice_id: 1 }
        .enqueue(store.pool())
        .await
        .unwrap();
    let deep = format!(r#"{{"a":{}1{}}}"#, "[".repeat(200), "]".repeat(200));
    sqlx::query("UPDATE job_jobs SET payload = ?2, errors = ?3, result = ?2 WHERE id = ?1")
        .bind(id)
        .bind(&deep)
        .bind(format!("[{deep}]"))
        .execute(store.pool())
        .await
        .unwrap();
    let row = store.get(id).await.unwrap().expect("the job");
    assert_eq!(row.payload, serde_json::Value::String(deep.clone()));
    assert_eq!(row.result, Some(serde_json::Value::String(deep.clone())));
    assert_eq!(row.errors.len(), 1);
    assert_eq!(row.errors[0].class, "unreadable");
    let listed = store.list(&job::JobFilter::default()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].result, row.result);
    db.close().await;
}

/// How far the rescuer's wall clock is moved, in seconds (see [`moved_clock`]).
static CLOCK_MOVED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn moved_clock() -> std::time::SystemTime {
    std::time::SystemTime::now()
        + std::time::Duration::from_secs(CLOCK_MOVED.load(Ordering::SeqCst))
}

#[tokio::test]
async fn after_the_wall_clock_jumps_a_live_lease_is_renewed_before_any_rescue() {
    // The machine sleeps a minute: SQLite's now (the wall clock) moves on, while the holder's
    // monotonic clock, by which it fences itself, does not. Every lease of the file then looked
    // expired to the first rescuer to run, which took the jobs their holders still ran, and
    // another worker started them again at once. The jump is played here by moving the
    // leases' ends a minute back (what the store sees) and the rescuer's wall clock a minute on
    // (what the process sees).
    use job_core::{ClaimKind, ClaimRequest, Lease, NewJob, Renewal, Rescuer, RescuerConfig};
    use std::time::Duration;
    let db = TestSqlite::new().await;
    let store = db.store();
    let kind = "clock.noop";
    for n in 0..2 {
        store
            .enqueue(NewJob::new(kind, format!(r#"{{"n":{n}}}"#)))
            .await
            .unwrap();
    }
    store.stage_due(u32::MAX).await.unwrap();
    let claimed = store
        .claim(&ClaimRequest {
            queue: "default".into(),
            kinds: vec![ClaimKind {
                kind: kind.into(),
                max_version: 1,
                lease: Duration::from_secs(30),
                concurrency: None,
                rate: None,
            }],
            limit: 2,
            worker_id: "sleeper".into(),
        })
        .await
        .unwrap();
    let [live, dead]: [Lease; 2] = claimed
        .iter()
        .map(|c| c.lease)
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();
    let mut rescuer = Rescuer::new(
        store.clone(),
        RescuerConfig {
            after_clock_jump: Duration::from_millis(300),
            ..RescuerConfig::default()
        },
    )
    .wall_clock(moved_clock);
    assert_eq!(rescuer.pass().await.unwrap(), Default::default());

    // A minute of sleep.
    sqlx::query("UPDATE job_jobs SET locked_until = locked_until - 60000000")
        .execute(store.pool())
        .await
        .unwrap();
    CLOCK_MOVED.store(60, Ordering::SeqCst);
    assert_eq!(
        rescuer.pass().await.unwrap(),
        Default::default(),
        "a pass right after the jump takes nothing"
    );
    // The live holder's next heartbeat renews its lease; the dead one's never comes.
    let report = store
        .heartbeat(&[Renewal {
            lease: live,
            extend_by: Duration::from_secs(30),
            stuck: false,
        }])
        .await
        .unwrap();
    assert!(report.lost.is_empty(), "{report:?}");
    // Past the hold, the lease that nobody renewed is rescued, and only that one.
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let rescued = rescuer.pass().await.unwrap();
        if rescued.retried > 0 {
            assert_eq!(rescued.retried, 1, "{rescued:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "the dead lease was not rescued"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let row = |id| {
        let store = store.clone();
        async move { store.get(id).await.unwrap().unwrap() }
    };
    assert_eq!(row(live.id).await.state, JobState::Running);
    assert_eq!(row(live.id).await.lock_token, Some(live.token));
    assert_eq!(row(dead.id).await.state, JobState::Retryable);
    db.close().await;
}

#[tokio::test]
async fn a_rescue_takes_only_leases_that_had_expired_when_its_pass_checked_the_clock() {
    // A pass checks the wall clock for a jump, then waits for the file's write lock (an
    // application's transaction holds it here), and SQLite's now is read only once the lock is
    // held. A jump of the clock during that wait made every live lease look expired: the pass
    // took jobs their holders still ran, and another worker started them again. Played here by
    // a lease that ends during the wait (what a jump does to every lease): live by the clock
    // the pass checked, it is left to the next pass.
    use job_core::{ClaimKind, ClaimRequest, NewJob, Rescuer, RescuerConfig};
    use std::time::Duration;
    let db = TestSqlite::new().await;
    let store = db.store();
    let kind = "clock.noop";
    store.enqueue(NewJob::new(kind, "{}")).await.unwrap();
    store.stage_due(u32::MAX).await.unwrap();
    let claimed = store
        .claim(&ClaimRequest {
            queue: "default".into(),
            kinds: vec![ClaimKind {
                kind: kind.into(),
                max_version: 1,
                lease: Duration::from_secs(2),
                concurrency: None,
                rate: None,
            }],
            limit: 1,
            worker_id: "holder".into(),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let mut rescuer = Rescuer::new(store.clone(), RescuerConfig::default());
    let mut app = store.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    let (first, ()) = tokio::join!(
        // Polled first: its clock check is now, well within the lease.
        rescuer.pass(),
        async {
            // The application's transaction ends once the lease has ended by SQLite's clock.
            loop {
                let ended: bool = sqlx::query_scalar(
                    "SELECT locked_until < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000 \
                     FROM job_jobs",
                )
                .fetch_one(&mut *app)
                .await
                .unwrap();
                if ended {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            app.commit().await.unwrap();
        }
    );
    assert_eq!(
        first.unwrap(),
        Default::default(),
        "the lease was live when the pass checked its clock"
    );
    let next = rescuer.pass().await.unwrap();
    assert_eq!(next.retried, 1, "the next pass takes it: {next:?}");
    db.close().await;
}

#[tokio::test]
async fn the_pruner_reads_each_pruned_state_through_its_own_index_never_the_dead_letters() {
    // Dead letters are never pruned. Read through one index of every finished row, they were
    // walked by every prune (every worker, every 10 s, under the file's write lock): the plan
    // of the shipped statement reads completed and cancelled rows only, each through its own
    // index, and scans no table.
    let db = TestSqlite::new().await;
    let store = db.store();
    let pool = store.pool();
    let prune = include_str!("../job-sqlite/src/sql/prune.sql");
    // An EXPLAIN reads no table, so it would plan with whatever schema its connection loaded
    // before the migration: a read first makes the connection load the current one.
    let mut conn = pool.acquire().await.unwrap();
    sqlx::query("SELECT count(*) FROM job_jobs")
        .execute(&mut *conn)
        .await
        .unwrap();
    let plan: Vec<(i64, i64, i64, String)> = sqlx::query_as(&format!("EXPLAIN QUERY PLAN {prune}"))
        .bind(0_i64)
        .bind(0_i64)
        .bind(100_i64)
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let steps: Vec<&str> = plan.iter().map(|(_, _, _, s)| s.as_str()).collect();
    let reads: Vec<&str> = steps
        .iter()
        .copied()
        .filter(|s| s.contains("job_jobs") && !s.contains("PRIMARY KEY"))
        .collect();
    assert!(
        reads.len() == 2
            && reads[0].starts_with("SEARCH job_jobs USING")
            && reads[0].contains("INDEX job_jobs_completed_idx (finalized_at<?)")
            && reads[1].starts_with("SEARCH job_jobs USING")
            // In the order of the later of finished and due: a job cancelled before its run
            // time is kept until then, and is not walked by every pass meanwhile.
            && reads[1].contains("INDEX job_jobs_cancelled_idx (<expr><?)"),
        "{steps:#?}"
    );

    // And it prunes as before: completed and cancelled rows past their retention, no dead
    // letter.
    for state in ["completed", "cancelled", "discarded"] {
        sqlx::query(
            "INSERT INTO job_jobs (kind, queue, payload, run_at, created_at, state, finalized_at) \
             VALUES ('k', 'default', '{}', 1000000, 1000000, ?1, 1000000)",
        )
        .bind(state)
        .execute(pool)
        .await
        .unwrap();
    }
    let pruned = store
        .prune(&job::PruneRequest {
            completed_retention: std::time::Duration::ZERO,
            cancelled_retention: std::time::Duration::ZERO,
            batch: 10,
        })
        .await
        .unwrap();
    assert_eq!(pruned, 2);
    let left: Vec<String> = sqlx::query_scalar("SELECT state FROM job_jobs")
        .fetch_all(pool)
        .await
        .unwrap();
    assert_eq!(left, ["discarded"]);
}

#[tokio::test]
async fn a_prune_of_large_jobs_deletes_its_whole_batch_and_the_pass_prunes_them_all() {
    // A prune transaction stops at 16 MiB of payloads, results, histories and steps (1,000
    // jobs of 1 MiB held the file's write lock about a second in one): the store still
    // answers for its whole batch, or the pruner, which repeats until a prune comes back
    // short of its batch, would stop after the first 16 MiB.
    let db = TestSqlite::new().await;
    let store = db.store();
    for i in 0..40 {
        sqlx::query(
            "INSERT INTO job_jobs (kind, queue, payload, run_at, created_at, state, finalized_at)
             VALUES ('k', 'q', json_object('pad', substr(hex(zeroblob(524000)), 1, 1048000)),
                     1000000, 1000000, 'completed', 1000000 + ?1)",
        )
        .bind(i)
        .execute(store.pool())
        .await
        .unwrap();
    }
    let request = job::PruneRequest {
        completed_retention: std::time::Duration::ZERO,
        cancelled_retention: std::time::Duration::ZERO,
        batch: 20,
    };
    assert_eq!(store.prune(&request).await.unwrap(), 20, "the whole batch");
    let config = job::PrunerConfig {
        completed_retention: std::time::Duration::ZERO,
        batch: 1000,
        ..job::PrunerConfig::default()
    };
    let pass = job::Pruner::new(store.clone(), config)
        .run_once()
        .await
        .unwrap();
    assert_eq!(pass.deleted, 20, "the rest, in one pass");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM job_jobs")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(left, 0);
    db.close().await;
}

#[tokio::test]
async fn a_prune_whose_deletes_a_trigger_ignores_ends() {
    // A prune goes on while its transactions pick as many jobs as they may: one whose deletes
    // an application's trigger ignores (RAISE(IGNORE)) would pick the same jobs for ever.
    let db = TestSqlite::new().await;
    let store = db.store();
    sqlx::query(
        "CREATE TRIGGER keep_jobs BEFORE DELETE ON job_jobs BEGIN SELECT RAISE(IGNORE); END",
    )
    .execute(store.pool())
    .await
    .unwrap();
    for _ in 0..3 {
        sqlx::query(
            "INSERT INTO job_jobs (kind, queue, payload, run_at, created_at, state, finalized_at)
             VALUES ('k', 'q', '{}', 1000000, 1000000, 'completed', 1000000)",
        )
        .execute(store.pool())
        .await
        .unwrap();
    }
    let request = job::PruneRequest {
        completed_retention: std::time::Duration::ZERO,
        cancelled_retention: std::time::Duration::ZERO,
        batch: 2,
    };
    // A deadline only, so that a prune that never ends fails the test: nothing is measured.
    let pruned = tokio::time::timeout(std::time::Duration::from_secs(30), store.prune(&request))
        .await
        .expect("the prune ended");
    assert_eq!(pruned.unwrap(), 0);
    db.close().await;
}

#[tokio::test]
async fn every_connection_of_the_store_cuts_the_wal_file_back_to_64_mib() {
    // Without a journal_size_limit the WAL file kept the size of the largest transaction it
    // ever held (a bulk enqueue) for good.
    let db = TestSqlite::new().await;
    let store = db.store();
    let pool = store.pool();
    let mut held = Vec::new();
    for _ in 0..pool.options().get_max_connections() {
        held.push(pool.acquire().await.unwrap());
    }
    let dedicated = store.dedicated("probe", 1);
    held.push(dedicated.pool().acquire().await.unwrap());
    for conn in &mut held {
        let limit: i64 = sqlx::query_scalar("PRAGMA journal_size_limit")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        assert_eq!(limit, 64 * 1024 * 1024);
    }
    drop(held);
    dedicated.close().await;
    db.close().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_write_waiting_for_a_connection_does_not_hold_up_the_writes_that_have_one() {
    // The store's writes took their place at the in-process gate before they asked the pool for
    // a connection: one waiting for a connection of a pool the application held whole (up to
    // sqlx's 30 s acquire timeout) held the gate meanwhile, and the heartbeats of the lease
    // keeper, on a pool of their own but behind the same gate, timed out: the worker fenced
    // its running jobs.
    let db = TestSqlite::new().await;
    let store = db.store();
    let job = NewJob {
        queue: "q".into(),
        ..NewJob::new("k", "{}")
    };
    store.enqueue(job).await.unwrap();
    let request = ClaimRequest {
        queue: "q".into(),
        kinds: vec![ClaimKind {
            kind: "k".into(),
            max_version: 1,
            lease: std::time::Duration::from_secs(30),
            concurrency: None,
            rate: None,
        }],
        limit: 1,
        worker_id: "probe-worker".into(),
    };
    let lease = store.claim(&request).await.unwrap().remove(0).lease;
    let keeper = store.dedicated("probe lease keeper", 1);

    // The application holds every connection of the store's pool; a write of the store waits.
    let pool = store.pool();
    let mut held = Vec::new();
    for _ in 0..pool.options().get_max_connections() {
        held.push(pool.acquire().await.unwrap());
    }
    let mut waiting = tokio::spawn({
        let store = store.clone();
        async move { store.enqueue(NewJob::new("k", "{}")).await }
    });
    // On this one-thread runtime each yield runs the write on to its next wait: the pool.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!waiting.is_finished(), "the write waits for a connection");

    let renewals = [Renewal {
        lease,
        extend_by: std::time::Duration::from_secs(30),
        stuck: false,
    }];
    tokio::select! {
        biased;
        report = keeper.heartbeat(&renewals) => {
            let report = report.expect("the heartbeat goes through");
            assert!(report.lost.is_empty(), "{report:?}");
        }
        ended = &mut waiting => panic!(
            "the heartbeat waited behind the write waiting for a connection, which ended \
             first: {ended:?}"
        ),
    }
    drop(held);
    waiting
        .await
        .unwrap()
        .expect("the write goes through once it has a connection");
    keeper.close().await;
    db.close().await;
}

#[tokio::test]
async fn an_up_to_date_file_opens_while_another_process_holds_its_write_lock() {
    // Every open took the file's write lock once per migration, applied or not: a worker
    // restarting while another process held the lock past the busy timeout (a bulk enqueue)
    // failed to open a file with nothing to migrate.
    let db = TestSqlite::new().await;
    let mut holder = db.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    sqlx::query("UPDATE job_settings SET payload_limit = payload_limit")
        .execute(&mut *holder)
        .await
        .unwrap();
    let opened = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        SqliteStore::open(db.path()),
    )
    .await
    .expect("opened without waiting for the write lock")
    .expect("opened");
    holder.rollback().await.unwrap();
    opened.pool().close().await;
    db.close().await;
}

#[tokio::test]
async fn a_file_whose_migration_is_recorded_under_another_name_is_refused() {
    let db = TestSqlite::new().await;
    sqlx::query("UPDATE job_schema_migrations SET name = 'something_else' WHERE version = 11")
        .execute(&db.pool())
        .await
        .unwrap();
    let refused = SqliteStore::open(db.path()).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("recorded in job_schema_migrations as `something_else`"),
        "{refused}"
    );
    db.close().await;
}

/// A backward step of the clock leaves starts stamped after now in a kind's rate window (here
/// half an hour ahead, the limit's worth): they are not counted, and the claim forgets them,
/// rather than hold the kind at its limit until the clock is past them.
#[tokio::test]
async fn starts_stamped_after_now_do_not_hold_a_rate_limited_kind_at_its_limit() {
    use job_core::RateLimit;
    use std::time::Duration;
    let db = TestSqlite::new().await;
    let store = db.store();
    let kind = "clock.limited";
    for _ in 0..3 {
        store.enqueue(NewJob::new(kind, "{}")).await.unwrap();
    }
    store.stage_due(u32::MAX).await.unwrap();
    let ahead = (chrono::Utc::now() + chrono::Duration::minutes(30)).timestamp_micros();
    for _ in 0..10 {
        sqlx::query("INSERT INTO job_rate_starts (kind, at) VALUES (?1, ?2)")
            .bind(kind)
            .bind(ahead)
            .execute(&db.pool())
            .await
            .unwrap();
    }
    let claimed = store
        .claim(&ClaimRequest {
            queue: "default".into(),
            kinds: vec![ClaimKind {
                kind: kind.into(),
                max_version: 1,
                lease: Duration::from_secs(30),
                concurrency: None,
                rate: Some(RateLimit::new(10, Duration::from_secs(3600))),
            }],
            limit: 10,
            worker_id: "clock".into(),
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3, "the starts after now held the kind");
    assert_eq!(count(&db.pool(), "job_rate_starts").await, 3);
}

#[tokio::test]
async fn a_file_opened_without_migrating_answers_the_migrations_it_lacks() {
    // `connect_with` does not migrate: a worker on such a file waits for the migrations
    // rather than running statements on tables that are not there.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let store = SqliteStore::connect_with(SqliteStore::options(&path))
        .await
        .unwrap();
    let lag = store.schema_lag().await.unwrap().expect("a lag");
    let all = job_sqlite::MIGRATIONS.len();
    assert_eq!((lag.first_missing, lag.missing, lag.recorded), (1, all, 0));
    store.migrate().await.unwrap();
    assert_eq!(store.schema_lag().await.unwrap(), None);
    store.pool().close().await;
}

#[tokio::test]
async fn a_dedicated_handle_opens_at_most_its_cap_of_connections() {
    // Each SQLite connection is a thread of its own: a worker's budget of two per queue opened
    // thousands for a worker of thousands of queues (`tests/worker_sqlite/connections.rs`).
    let db = TestSqlite::new().await;
    let store = db.store();
    let few = store.dedicated("probe", 3);
    let many = store.dedicated("probe", 4_004);
    assert_eq!(few.pool().options().get_max_connections(), 3);
    assert_eq!(
        many.pool().options().get_max_connections(),
        job_sqlite::MAX_DEDICATED_CONNECTIONS
    );
    few.close().await;
    many.close().await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_a_worker_makes_goes_through_on_a_handle_of_one_connection() {
    // The worker's handles are capped (`MAX_DEDICATED_CONNECTIONS`): a call that held a
    // connection of its handle while it asked for a second would wait for itself once the
    // others held the rest, until sqlx's acquire timeout (30 s) failed it. On a handle of one
    // connection, every call of the worker at once, each twice, must all go through.
    use job::{Admin, Finalize, JobFilter, Outcome, PruneRequest, Release};
    use std::time::Duration;

    let db = TestSqlite::new().await;
    let store = db.store();
    for _ in 0..6 {
        let job = NewJob {
            queue: "q".into(),
            ..NewJob::new("k", "{}")
        };
        store.enqueue(job).await.unwrap();
    }
    let one = store.dedicated("probe worker", 1);
    let request = ClaimRequest {
        queue: "q".into(),
        kinds: vec![ClaimKind {
            kind: "k".into(),
            max_version: 1,
            lease: Duration::from_secs(30),
            concurrency: None,
            rate: None,
        }],
        limit: 3,
        worker_id: "probe-worker".into(),
    };
    let all_at_once = || async {
        let leases: Vec<_> = one
            .claim(&request)
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.lease)
            .collect();
        let [a, b, c] = leases[..] else {
            panic!("claimed {leases:?}")
        };
        let renewals = [Renewal {
            lease: a,
            extend_by: Duration::from_secs(30),
            stuck: false,
        }];
        let prune = PruneRequest {
            completed_retention: Duration::from_secs(3600),
            cancelled_retention: Duration::from_secs(3600),
            batch: 10,
        };
        let outcomes = [Finalize::new(b, Outcome::Complete)];
        let releases = [Release::unstarted(c)];
        let every = JobFilter::default();
        let (heartbeat, saved, loaded, one_step, started, finalized, released) = tokio::join!(
            one.heartbeat(&renewals),
            one.save_step(&a, "step", "1"),
            one.load_steps(&a),
            one.load_step(&a, "step"),
            one.record_start(b),
            one.finalize(&outcomes),
            one.release(&releases),
        );
        let (got, rescued, expired, pruned, lag, enqueued, stats, listed) = tokio::join!(
            one.get(a.id),
            one.rescue_expired(10),
            one.expire(10),
            one.prune(&prune),
            one.schema_lag(),
            one.enqueue(NewJob::new("k", "{}")),
            one.stats(&every),
            one.list(&every),
        );
        heartbeat.unwrap();
        saved.unwrap();
        loaded.unwrap();
        one_step.unwrap();
        started.unwrap();
        finalized.unwrap();
        released.unwrap();
        got.unwrap();
        rescued.unwrap();
        expired.unwrap();
        pruned.unwrap();
        lag.unwrap();
        enqueued.unwrap();
        stats.unwrap();
        listed.unwrap();
    };
    // A deadline only, so that a call waiting for itself fails the test: nothing is measured.
    tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(all_at_once(), all_at_once());
    })
    .await
    .expect("every call went through");
    one.close().await;
    db.close().await;
}

/// A claim request for `kind` on `queue`, as a worker makes it.
fn claim_of(queue: &str, kind: &str, limit: u32) -> ClaimRequest {
    ClaimRequest {
        queue: queue.into(),
        kinds: vec![ClaimKind {
            kind: kind.into(),
            max_version: 1,
            lease: std::time::Duration::from_secs(30),
            concurrency: None,
            rate: None,
        }],
        limit,
        worker_id: "idle".into(),
    }
}

#[tokio::test]
async fn an_idle_claim_answers_while_another_connection_holds_the_write_lock() {
    // Every claim was a write transaction, empty or not: each idle queue of a worker took the
    // file's one write lock at every poll and every wake-up. A claim with nothing to take now
    // reads first, as a WAL reader, which neither waits for the writer nor stops it.
    use std::time::Duration;
    let db = TestSqlite::new().await;
    let store = db.store();
    // Due jobs of another queue, another kind, a newer version: none of them this claim's.
    let others = [
        NewJob {
            queue: "elsewhere".into(),
            ..NewJob::new("k", "{}")
        },
        NewJob {
            queue: "q".into(),
            ..NewJob::new("other", "{}")
        },
        NewJob {
            queue: "q".into(),
            payload_version: 2,
            ..NewJob::new("k", "{}")
        },
        NewJob {
            queue: "q".into(),
            run_at: job_core::RunAt::In(Duration::from_secs(3600)),
            ..NewJob::new("k", "{}")
        },
    ];
    for job in others {
        store.enqueue(job).await.unwrap();
    }
    let mut holder = db.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    sqlx::query("UPDATE job_settings SET payload_limit = payload_limit")
        .execute(&mut *holder)
        .await
        .unwrap();
    let claimed =
        tokio::time::timeout(Duration::from_secs(5), store.claim(&claim_of("q", "k", 10)))
            .await
            .expect("an idle claim answered without waiting for the write lock")
            .expect("an idle claim");
    assert!(claimed.is_empty(), "claimed {claimed:?}");
    // Still held: the claim did not wait for it to end.
    sqlx::query("SELECT 1").execute(&mut *holder).await.unwrap();
    holder.rollback().await.unwrap();
    db.close().await;
}

#[tokio::test]
async fn a_scheduled_job_is_claimed_once_it_is_due_without_staging() {
    // The read before the claim's write takes the database's now as the claim does: a job
    // that becomes due by time is found by the next claim.
    use std::time::Duration;
    let db = TestSqlite::new().await;
    let store = db.store();
    let id = store
        .enqueue(NewJob {
            queue: "q".into(),
            run_at: job_core::RunAt::In(Duration::from_millis(400)),
            ..NewJob::new("k", "{}")
        })
        .await
        .unwrap();
    assert_eq!(
        store.get(id).await.unwrap().unwrap().state,
        JobState::Scheduled
    );
    assert!(store
        .claim(&claim_of("q", "k", 10))
        .await
        .unwrap()
        .is_empty());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let claimed = loop {
        let claimed = store.claim(&claim_of("q", "k", 10)).await.unwrap();
        if !claimed.is_empty() {
            break claimed;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the job due in 400 ms was not claimed in 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].lease.id, id);
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_of_an_applications_own_committed_by_a_reset_wakes_the_workers() {
    // SQLite calls the WAL hook, which sends the wake-up of an insert, only for a statement
    // stepped to its end: an autocommit `INSERT … RETURNING` read with `fetch_one` commits
    // when sqlx resets it, and woke no one until that connection's next statement (or the
    // workers' next poll). The runtime now sends the wake-up the WAL hook did not.
    use std::time::Duration;
    let db = TestSqlite::new().await;
    let store = db.store();
    let mut wakeups = store.listen().await.unwrap();
    for round in 0..20 {
        let mut conn = store.pool().acquire().await.unwrap();
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO job_jobs (kind, queue, payload, state, run_at, created_at) \
             VALUES ('k', 'q', '{}', 'available', 0, 0) RETURNING id",
        )
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        let woken = tokio::time::timeout(Duration::from_secs(10), wakeups.recv()).await;
        assert!(
            matches!(woken, Ok(Some(_))),
            "round {round}: job {id}, inserted on its own with fetch_one, woke no one"
        );
        // The connection stays out of the pool meanwhile: no later statement of it could
        // have sent the wake-up.
        drop(conn);
        while wakeups.try_recv().is_ok() {}
    }
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_inserted_job_is_claimed_by_the_claims_its_wake_ups_start() {
    // The wake-up of an insert was sent from SQLite's commit hook, which runs as the commit
    // starts: a claim that reads before it writes could run before the rows were visible,
    // find nothing, and leave the job to the next poll. It is now sent once the commit has
    // taken place (the WAL hook), and for a commit no WAL hook follows (`fetch_one`) by the
    // runtime 2, 20 and 200 ms after it began: a claim woken before a slow commit's rows could
    // be read (a loaded machine: 1 claim in 300 found nothing) is woken again. No worker
    // polls here, so a job whose wake-ups all came too early would never be claimed.
    use std::time::Duration;
    let db = TestSqlite::new().await;
    let store = db.store();
    let mut wakeups = store.listen().await.unwrap();
    let rounds = 300;
    let claimer = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut claimed = 0;
            while claimed < rounds {
                let woken = tokio::time::timeout(Duration::from_secs(10), wakeups.recv()).await;
                assert!(
                    matches!(woken, Ok(Some(_))),
                    "{claimed} of {rounds} jobs claimed, then no wake-up for 10 s"
                );
                claimed += store.claim(&claim_of("q", "k", 10)).await.unwrap().len();
            }
            claimed
        })
    };
    for round in 0..rounds {
        // One job at a time: the next goes in once the last was claimed. Through the store (a
        // transaction committed by `COMMIT`) and, every other round, through a connection of
        // the application's pool (an insert committed on its own, read with `fetch_one`).
        let job = NewJob {
            queue: "q".into(),
            ..NewJob::new("k", "{}")
        };
        let id = if round % 2 == 0 {
            store.enqueue(job).await.unwrap()
        } else {
            let mut conn = store.pool().acquire().await.unwrap();
            job::sqlite::enqueue(&mut conn, &job).await.unwrap()
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while store.get(id).await.unwrap().unwrap().state != JobState::Running {
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: job {id} was not claimed within 10 s of its insert"
            );
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }
    assert_eq!(claimer.await.unwrap(), rounds);
    db.close().await;
}
