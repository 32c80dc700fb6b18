//! The test the README's testing section shows, as it is.

// README: begin
use job::prelude::*;
use job_testkit::prelude::*;
use serde_json::json;
use shop::{Mailer, Payments, SendConfirmation};

#[tokio::test]
async fn an_order_commits_with_its_confirmation_and_the_email_goes_out_once() {
    // A fresh database per test, with the framework's schema; the app adds its own tables.
    let db = TestDb::new().await;
    let (pool, store) = (db.pool(), db.store());
    shop::migrate(&pool).await.unwrap();

    // The code under test enqueues inside its transaction.
    let mut tx = pool.begin().await.unwrap();
    let order = shop::place_order(&mut tx, "ada@example.com", 4200)
        .await
        .unwrap();
    assert_enqueued::<SendConfirmation>(&mut *tx, json!({ "order_id": order })).await;
    tx.commit().await.unwrap();

    // A real worker, crashed once after the handler ran: the retry finds the email's step
    // recorded and sends nothing. `rescue_at_once` brings the crashed job back without
    // waiting out its lease (2 s under `for_tests`).
    let mailer = Mailer::default();
    let faults = Faults::new()
        .crash_after(Point::Perform)
        .kind::<SendConfirmation>()
        .times(1)
        .rescue_at_once(&store);
    let worker = shop::worker(store.clone(), &pool, &mailer, &Payments::default())
        .faults(faults.clone())
        .for_tests()
        .build()
        .unwrap()
        .start();
    let id = assert_enqueued::<SendConfirmation>(&pool, json!({ "order_id": order })).await;
    let row = wait_for(&store, id, JobState::Completed).await;
    worker.shutdown().await;
    faults.assert_fired(); // a misspelled kind or step would never crash anything
    assert_eq!(row.attempt, 2);
    assert_eq!(mailer.sent().len(), 1);
}
// README: end

#[test]
fn the_readme_shows_this_test_as_it_is() {
    let this = include_str!("readme_example.rs");
    let begin = this.find("// README: begin\n").unwrap() + "// README: begin\n".len();
    let end = this.find("// README: end").unwrap();
    let readme = include_str!("../../../README.md");
    assert!(
        readme.contains(&this[begin..end]),
        "README.md's testing section must show examples/shop/tests/readme_example.rs between \
         its README markers, as it is"
    );
}
