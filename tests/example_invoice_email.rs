//! The `invoice_email` example's promise against real PostgreSQL: an invoice and its email
//! job commit together or not at all, and a crash between sending and recording the outcome
//! sends no second email.

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/invoice_email.rs"]
mod example;

use example::{create_invoice, create_tables, run, SendInvoiceEmail};
use job::JobState;
use job_testkit::{assert_enqueued, refute_enqueued, Faults, Point, TestDb};
use serde_json::json;

#[tokio::test]
async fn a_crash_after_sending_sends_one_email_across_two_attempts() {
    let db = TestDb::new().await;
    let faults = Faults::new()
        .crash_after(Point::Perform)
        .kind::<SendInvoiceEmail>()
        .times(1);
    let report = run(&db.pool(), faults).await.unwrap();
    assert_eq!(report.crashes, 1, "the fault fired");
    assert_eq!(report.sends, 1, "exactly one email across the crash");
    assert!(report.emailed);
    let job = &report.job;
    assert_eq!(job.state, JobState::Completed);
    assert_eq!(job.attempt, 2, "rescued after its lease expired, run again");
    assert_eq!(job.errors.len(), 1);
    assert_eq!(job.errors[0].class, "lease_expired");
    assert!(report.held());
    db.close().await;
}

#[tokio::test]
async fn a_crash_before_finalize_sends_one_email_too() {
    let db = TestDb::new().await;
    let faults = Faults::new()
        .crash_before(Point::Finalize)
        .kind::<SendInvoiceEmail>()
        .times(1);
    let report = run(&db.pool(), faults).await.unwrap();
    assert_eq!(report.crashes, 1);
    assert_eq!(report.sends, 1);
    assert_eq!(
        (report.job.state, report.job.attempt),
        (JobState::Completed, 2)
    );
    assert_eq!(report.job.errors[0].class, "lease_expired");
    db.close().await;
}

#[tokio::test]
async fn without_a_crash_one_attempt_sends_one_email() {
    let db = TestDb::new().await;
    let report = run(&db.pool(), Faults::new()).await.unwrap();
    assert_eq!(report.crashes, 0);
    assert_eq!(report.sends, 1);
    assert_eq!(
        (report.job.state, report.job.attempt),
        (JobState::Completed, 1)
    );
    assert!(report.job.errors.is_empty());
    db.close().await;
}

#[tokio::test]
async fn the_invoice_and_its_email_job_commit_together_or_not_at_all() {
    let db = TestDb::new().await;
    let pool = db.pool();
    create_tables(&pool).await.unwrap();

    // Rolled back: neither the invoice nor its job exists.
    let mut tx = pool.begin().await.unwrap();
    let (dropped, _) = create_invoice(&mut tx, "bob@example.com", 100)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let invoices: i64 = sqlx::query_scalar("SELECT count(*) FROM invoices")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(invoices, 0);
    refute_enqueued::<SendInvoiceEmail>(&pool, json!({ "invoice_id": dropped })).await;

    // Committed: both exist.
    let mut tx = pool.begin().await.unwrap();
    let (kept, job_id) = create_invoice(&mut tx, "bob@example.com", 100)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        assert_enqueued::<SendInvoiceEmail>(&pool, json!({ "invoice_id": kept })).await,
        job_id
    );
    db.close().await;
}
