//! The `ledger_batch` example's promise against real PostgreSQL: each account's entries post
//! one at a time in enqueue order across two workers, also when a posting crashes after it
//! ran, and the batch's callback runs once, after every statement, with their results.

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/ledger_batch.rs"]
mod example;

use example::{run, PostEntry};
use job::JobState;
use job_testkit::{Faults, Point, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_post_in_order_and_the_day_closes_once_across_a_crash() {
    let db = TestDb::new().await;
    let faults = Faults::new()
        .crash_after(Point::Perform)
        .kind::<PostEntry>()
        .times(1);
    let report = run(&db.pool(), faults).await.unwrap();
    assert_eq!(report.crashes, 1, "the fault fired");
    assert!(report.held(), "{report:#?}");
    assert_eq!(report.close.state, JobState::Completed);
    assert_eq!(report.close.attempt, 1, "the callback ran once");
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_crash_the_day_closes_with_the_sum_of_the_statements() {
    let db = TestDb::new().await;
    let report = run(&db.pool(), Faults::new()).await.unwrap();
    assert_eq!(report.crashes, 0);
    assert!(report.held(), "{report:#?}");
    db.close().await;
}
