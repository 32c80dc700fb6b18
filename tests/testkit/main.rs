//! Complete example tests of each testkit helper, the way an application would write them.
//! Each test is also the documentation of its helper.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::prelude::*;
use job::{JobState, Outcome};
use job_testkit::{
    assert_enqueued, enqueued, perform, refute_enqueued, wait_until_idle, Drain, Faults, Inline,
    Outage, OutageStore, Point, TestDb, TestWorker,
};
use serde_json::json;

mod enqueued;
mod pipeline;

/// Counts emails "sent", as an application's mailer would.
#[derive(Default)]
struct Mailer {
    sent: AtomicU32,
}

/// Sends a receipt; fails on its first attempt when asked to.
#[job(retry = 3, lease = "300ms", backoff(base = "1h", cap = "2h"))]
async fn send_receipt(ctx: JobContext, order_id: i64, flaky: bool) -> Result<(), JobError> {
    if flaky && ctx.attempt() == 1 {
        return Err(JobError::retryable("smtp timeout"));
    }
    ctx.state::<Arc<Mailer>>()?
        .sent
        .fetch_add(1, Ordering::SeqCst);
    let _ = order_id;
    Ok(())
}

#[tokio::test]
async fn perform_runs_a_handler_inline_and_returns_its_outcome() {
    let mailer = Arc::new(Mailer::default());
    let inline = Inline::new().state(mailer.clone());
    let outcome = inline
        .perform(SendReceipt {
            order_id: 1,
            flaky: false,
        })
        .await;
    assert_eq!(outcome, Outcome::Complete);
    assert_eq!(mailer.sent.load(Ordering::SeqCst), 1);

    // The first attempt of a flaky send is a retry; the second completes.
    let retry = inline
        .perform(SendReceipt {
            order_id: 2,
            flaky: true,
        })
        .await;
    assert_eq!(retry.name(), "retry");
    let second = inline
        .clone()
        .attempt(2)
        .perform(SendReceipt {
            order_id: 2,
            flaky: true,
        })
        .await;
    assert_eq!(second, Outcome::Complete);

    // Without the state it needs, the handler fails terminally.
    assert_eq!(
        perform(SendReceipt {
            order_id: 3,
            flaky: false
        })
        .await
        .name(),
        "discard"
    );
}

#[tokio::test]
async fn assert_enqueued_finds_a_job_by_part_of_its_payload() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let mut tx = pool.begin().await.unwrap();
    // The code under test: an order and its receipt job in one transaction.
    SendReceipt {
        order_id: 42,
        flaky: false,
    }
    .enqueue(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let id = assert_enqueued::<SendReceipt>(&pool, json!({ "order_id": 42 })).await;
    refute_enqueued::<SendReceipt>(&pool, json!({ "order_id": 7 })).await;
    let all = enqueued::<SendReceipt>(&pool).await;
    assert_eq!(all.len(), 1);
    assert_eq!((all[0].id, all[0].job.order_id), (id, 42));
    db.close().await;
}

#[tokio::test]
async fn drain_runs_every_due_job_and_reports_each_attempt() {
    let db = TestDb::new().await;
    let store = db.store();
    let mailer = Arc::new(Mailer::default());
    SendReceipt {
        order_id: 1,
        flaky: false,
    }
    .enqueue(store.pool())
    .await
    .unwrap();
    SendReceipt {
        order_id: 2,
        flaky: true,
    }
    .enqueue(store.pool())
    .await
    .unwrap();

    // A fixed seed fixes the retry's jittered delay (well over a second with a 1h base).
    let drain = Drain::new()
        .register::<SendReceipt>()
        .state(mailer.clone())
        .seed(7);
    let first_pass = drain.run(&store, "default").await;
    let names: Vec<_> = first_pass.iter().map(|d| d.outcome.name()).collect();
    assert_eq!(
        names,
        ["complete", "retry"],
        "the retry waits out its backoff"
    );

    // Asked to, the drain also runs jobs that are not due yet, such as that retry.
    let rest = drain.with_scheduled(true).run(&store, "default").await;
    assert_eq!(rest.len(), 1);
    assert_eq!(
        (rest[0].attempt, rest[0].outcome.clone()),
        (2, Outcome::Complete)
    );
    assert_eq!(mailer.sent.load(Ordering::SeqCst), 2);
    db.close().await;
}

/// Charges an order; the card is always declined.
#[job(compensate = RefundCharge)]
async fn charge_card(_ctx: JobContext, order_id: i64) -> Result<(), JobError> {
    let _ = order_id;
    Err(JobError::terminal("card declined"))
}

/// Undoes a charge, from the discarded job it is given.
#[job]
async fn refund_charge(_ctx: JobContext, discarded: job::Discarded) -> Result<(), JobError> {
    let _ = discarded;
    Ok(())
}

#[tokio::test]
async fn drain_enqueues_the_compensating_job_of_a_discard_and_stops_at_its_bound() {
    let db = TestDb::new().await;
    let store = db.store();
    ChargeCard { order_id: 5 }
        .enqueue(store.pool())
        .await
        .unwrap();
    // As a worker does: the discard enqueues the kind's compensating job.
    let drained = Drain::new()
        .register::<ChargeCard>()
        .register::<RefundCharge>()
        .run(&store, "default")
        .await;
    let ran: Vec<(&str, &str)> = drained
        .iter()
        .map(|d| (d.kind.as_str(), d.outcome.name()))
        .collect();
    assert_eq!(
        ran,
        [("charge_card", "discard"), ("refund_charge", "complete")]
    );

    // `max_attempts_run` is a bound on what runs, even within one claim.
    for n in 0..5 {
        SendReceipt {
            order_id: n,
            flaky: false,
        }
        .enqueue(store.pool())
        .await
        .unwrap();
    }
    let drained = Drain::new()
        .register::<SendReceipt>()
        .state(Arc::new(Mailer::default()))
        .max_attempts_run(2)
        .run(&store, "default")
        .await;
    assert_eq!(drained.len(), 2);
    db.close().await;
}

/// Ships an order, completing the job in the same transaction as its own write: its `Ok`
/// value comes after that commit, so it sets the result it keeps first when asked to.
#[job(queue = "ship")]
async fn ship_order(ctx: JobContext, order_id: i64, keep_result: bool) -> Result<i64, JobError> {
    let pool = ctx.state::<job::PgPool>()?;
    let mut tx = pool.begin().await?;
    if keep_result {
        ctx.set_result(&(order_id * 10))?;
    }
    job::complete_in(&mut tx, &ctx).await?;
    tx.commit().await?;
    Ok(order_id * 10)
}

#[tokio::test]
async fn drain_reports_a_job_its_handler_completed_in_its_own_transaction_as_stored() {
    // The drain's own finalize finds such a job done: it reported the write as `LeaseLost`
    // and, as the result, the `Ok` value the transaction never stored.
    let db = TestDb::new().await;
    let store = db.store();
    for (order_id, keep_result) in [(4, false), (5, true)] {
        ShipOrder {
            order_id,
            keep_result,
        }
        .enqueue(store.pool())
        .await
        .unwrap();
    }
    let drained = Drain::new()
        .register::<ShipOrder>()
        .state(store.pool().clone())
        .run(&store, "ship")
        .await;
    let seen: Vec<_> = drained
        .iter()
        .map(|d| (d.outcome.name(), d.written, d.result.clone()))
        .collect();
    assert_eq!(
        seen,
        [
            ("complete", job::Finalized::Applied, None),
            ("complete", job::Finalized::Applied, Some(json!(50))),
        ]
    );
    for d in &drained {
        let row = store.get(d.id).await.unwrap().unwrap();
        assert_eq!(
            (row.state, row.result.clone()),
            (JobState::Completed, d.result.clone())
        );
    }
    db.close().await;
}

/// A payload every enqueue refuses does not run inline either: a NaN would reach the handler
/// as `None`.
#[job]
async fn record_reading(_ctx: JobContext, value: Option<f64>) -> Result<(), JobError> {
    let _ = value;
    Ok(())
}

#[tokio::test]
async fn perform_refuses_a_payload_every_enqueue_refuses() {
    let outcome = perform(RecordReading {
        value: Some(f64::NAN),
    })
    .await;
    let Outcome::Discard { failure } = outcome else {
        panic!("expected a poison discard, got {outcome:?}");
    };
    assert!(
        failure.message.contains("`value` is NaN"),
        "{}",
        failure.message
    );
    assert_eq!(
        perform(RecordReading { value: Some(2.5) }).await,
        Outcome::Complete
    );
}

/// `wait_until_idle` waits for a dependent that its finished dependency released: it is
/// `pending` until the next stager pass, and assertions made after "idle" ran before it.
#[tokio::test]
async fn wait_until_idle_waits_for_a_dependent_its_dependency_released() {
    let db = TestDb::new().await;
    let store = db.store();
    let pool = db.pool();
    let first = SendReceipt {
        order_id: 1,
        flaky: false,
    }
    .enqueue(&pool)
    .await
    .unwrap();
    let then = job::Enqueue::new(SendReceipt {
        order_id: 2,
        flaky: false,
    })
    .depends_on([first])
    .enqueue(&pool)
    .await
    .unwrap();
    let worker = Worker::builder(store.clone())
        .register::<SendReceipt>()
        .state(Arc::new(Mailer::default()))
        .queue("default", 2)
        .for_tests()
        // A stager pass well after the dependency finished: "idle" must wait for it.
        .configure(|c| {
            c.poll_interval = Duration::from_millis(300);
            c.stager.interval = Duration::from_millis(300);
        })
        .build()
        .unwrap()
        .start();
    wait_until_idle(&store, "default").await;
    for id in [first, then] {
        let row = store.get(id).await.unwrap().unwrap();
        assert_eq!(row.state, JobState::Completed, "job {id}");
    }
    worker.shutdown().await;
    db.close().await;
}

/// The same on SQLite, with the test's own transaction through `TestSqlite::pool`.
#[tokio::test]
async fn wait_until_idle_and_the_pool_serve_sqlite_too() {
    let db = job_testkit::TestSqlite::new().await;
    let store = db.store();
    let mut tx = db.pool().begin_with("BEGIN IMMEDIATE").await.unwrap();
    let ids = [
        SendReceipt {
            order_id: 1,
            flaky: false,
        }
        .enqueue(&mut *tx)
        .await
        .unwrap(),
        SendReceipt {
            order_id: 2,
            flaky: false,
        }
        .enqueue(&mut *tx)
        .await
        .unwrap(),
    ];
    tx.commit().await.unwrap();
    let mailer = Arc::new(Mailer::default());
    let worker = Worker::builder(store.clone())
        .register::<SendReceipt>()
        .state(mailer.clone())
        .queue("default", 1)
        .for_tests()
        .build()
        .unwrap()
        .start();
    wait_until_idle(&store, "default").await;
    for id in ids {
        let row = store.get(id).await.unwrap().unwrap();
        assert_eq!(row.state, JobState::Completed, "job {id}");
    }
    assert_eq!(mailer.sent.load(Ordering::SeqCst), 2);
    worker.shutdown().await;
    db.close().await;
}

#[tokio::test]
async fn faults_crash_an_execution_where_a_killed_process_would_stop() {
    let db = TestDb::new().await;
    let store = db.store();
    let mailer = Arc::new(Mailer::default());
    let id = SendReceipt {
        order_id: 9,
        flaky: false,
    }
    .enqueue(store.pool())
    .await
    .unwrap();

    // Crash after the handler sent the email and before its outcome is written.
    let faults = Faults::new()
        .crash_after(Point::Perform)
        .kind::<SendReceipt>()
        .times(1);
    let mut config = job::WorkerConfig::default();
    config.rescuer.interval = Duration::from_millis(50);
    let worker = Worker::builder(store.clone())
        .register::<SendReceipt>()
        .queue("default", 2)
        .config(config)
        .state(mailer.clone())
        .faults(faults.clone())
        .build()
        .unwrap()
        .start();
    let row = wait_for(&store, id, JobState::Completed).await;
    worker.shutdown().await;

    assert_eq!(faults.crashes().len(), 1);
    assert_eq!(
        row.attempt, 2,
        "rescued after its lease expired and run again"
    );
    assert_eq!(row.errors[0].class, "lease_expired");
    // At least once: the side effect happened twice. Durable steps make it once.
    assert_eq!(mailer.sent.load(Ordering::SeqCst), 2);
    db.close().await;
}

#[tokio::test]
async fn an_outage_store_cuts_the_worker_off_and_nothing_is_lost() {
    let db = TestDb::new().await;
    let store = OutageStore::new(db.store(), Outage::default());
    let mailer = Arc::new(Mailer::default());
    let worker = Worker::builder(store.clone())
        .register::<SendReceipt>()
        .queue("default", 2)
        .poll_interval(Duration::from_millis(20))
        .state(mailer.clone())
        .build()
        .unwrap()
        .start();
    store.layer().fail_for(Duration::from_millis(300));
    let id = SendReceipt {
        order_id: 5,
        flaky: false,
    }
    .enqueue(store.inner().pool())
    .await
    .unwrap();
    wait_for(store.inner(), id, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(mailer.sent.load(Ordering::SeqCst), 1);
    db.close().await;
}

async fn wait_for(store: &PgStore, id: JobId, state: JobState) -> job::JobRow {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let row = store.get(id).await.unwrap().expect("the job exists");
        if row.state == state {
            return row;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "job {id} is {} after 30s, expected {state}",
            row.state
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
