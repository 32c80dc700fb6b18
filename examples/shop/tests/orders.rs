//! The shop's tests, written the way an application writes them: a database per test, the
//! shop's own migrations, the testkit's helpers.

use std::time::Duration;

use job::prelude::*;
use job_testkit::prelude::*;
use serde_json::json;
use shop::{ChargeOrder, Mailer, Payments, SendConfirmation};

/// A fresh database with the shop's schema.
async fn shop_db() -> (TestDb, PgPool, PgStore) {
    let db = TestDb::new().await;
    let pool = db.pool();
    shop::migrate(&pool).await.unwrap();
    let store = db.store();
    (db, pool, store)
}

/// Places an order in its own transaction.
async fn order(pool: &PgPool, email: &str) -> i64 {
    let mut tx = pool.begin().await.unwrap();
    let id = shop::place_order(&mut tx, email, 4200).await.unwrap();
    tx.commit().await.unwrap();
    id
}

#[tokio::test]
async fn an_order_rolled_back_leaves_no_job() {
    let (_db, pool, _store) = shop_db().await;
    let mut tx = pool.begin().await.unwrap();
    let id = shop::place_order(&mut tx, "ada@example.com", 4200)
        .await
        .unwrap();
    assert_enqueued::<SendConfirmation>(&mut *tx, json!({ "order_id": id })).await;
    tx.rollback().await.unwrap();
    refute_enqueued::<SendConfirmation>(&pool, json!({ "order_id": id })).await;
    refute_enqueued::<ChargeOrder>(&pool, json!({ "order_id": id })).await;
}

#[tokio::test]
async fn a_confirmation_performed_twice_sends_one_email() {
    let (_db, pool, _store) = shop_db().await;
    let id = order(&pool, "ada@example.com").await;
    let mailer = Mailer::default();
    let job = Inline::new().state(pool.clone()).state(mailer.clone());
    assert_eq!(
        job.perform(SendConfirmation { order_id: id }).await,
        Outcome::Complete
    );
    let retry = job.clone().attempt(2);
    assert_eq!(
        retry.perform(SendConfirmation { order_id: id }).await,
        Outcome::Complete
    );
    assert_eq!(mailer.sent(), ["ada@example.com: order 1 confirmed"]);
}

#[tokio::test]
async fn a_charge_that_fails_once_is_retried_and_charged_once() {
    let (_db, pool, store) = shop_db().await;
    let id = order(&pool, "ada@example.com").await;
    let payments = Payments::failing_first(1);
    let drained = Drain::new()
        .register::<ChargeOrder>()
        .state(pool.clone())
        .state(payments.clone())
        .with_scheduled(true)
        .run(&store, "default")
        .await;
    let outcomes: Vec<&str> = drained.iter().map(|d| d.outcome.name()).collect();
    assert_eq!(outcomes, ["retry", "complete"]);
    assert_eq!(payments.charges(), 1);
    let charged: bool = sqlx::query_scalar("SELECT charged FROM orders WHERE id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(charged);
}

#[tokio::test]
async fn a_worker_killed_after_the_email_sends_no_second_one() {
    let (_db, pool, store) = shop_db().await;
    let mailer = Mailer::default();
    let id = order(&pool, "ada@example.com").await;
    let faults = Faults::new()
        .crash_after(Point::Perform)
        .kind::<SendConfirmation>()
        .times(1);
    let worker = shop::worker(store.clone(), &pool, &mailer, &Payments::default())
        .faults(faults.clone())
        .for_tests()
        .build()
        .unwrap()
        .start();
    let confirmation = assert_enqueued::<SendConfirmation>(&pool, json!({ "order_id": id })).await;
    let row = wait_for(&store, confirmation, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!((row.attempt, faults.crashes().len()), (2, 1));
    assert_eq!(
        mailer.sent().len(),
        1,
        "the second attempt found the email's step recorded"
    );
}

#[tokio::test]
async fn a_database_outage_sends_exactly_one_email_per_order() {
    let (_db, pool, store) = shop_db().await;
    let mailer = Mailer::default();
    let mut orders = Vec::new();
    for n in 0..20 {
        orders.push(order(&pool, &format!("customer{n}@example.com")).await);
    }
    let cut_off = OutageStore::new(store.clone(), Outage::default());
    let worker = shop::worker(cut_off.clone(), &pool, &mailer, &Payments::default())
        .configure(|c| c.poll_interval = Duration::from_millis(20))
        .build()
        .unwrap()
        .start();
    // The database goes away right after the first email, while the others are being sent
    // and their records written.
    while mailer.sent().is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    cut_off.layer().fail_for(Duration::from_millis(500));
    wait_until_idle(&store, "default").await;
    worker.shutdown().await;
    assert!(cut_off.layer().calls_refused() > 0, "the outage was met");
    assert_eq!(mailer.sent().len(), orders.len(), "{:?}", mailer.sent());
}

#[tokio::test]
async fn a_second_charge_of_an_order_is_refused_as_a_duplicate() {
    let (_db, pool, _store) = shop_db().await;
    let id = order(&pool, "ada@example.com").await;
    let first = assert_enqueued::<ChargeOrder>(&pool, json!({ "order_id": id })).await;
    match (ChargeOrder { order_id: id }).enqueue(&pool).await {
        Err(EnqueueError::Duplicate { existing, .. }) => assert_eq!(existing, first),
        other => panic!("expected a duplicate of job {first}, got {other:?}"),
    }
}
