//! Heartbeats, PostgreSQL specifics: a cancellation requested in SQL is reported. The
//! heartbeat contract (renewal, lost leases) is in `job_testkit::conformance::heartbeat`.

mod store_support;

use std::time::Duration;

use job_core::{Lease, Renewal, Store};
use job_testkit::TestDb;
use store_support::{claim_one, new_job};

fn renew(lease: Lease, secs: u64) -> Renewal {
    Renewal {
        lease,
        extend_by: Duration::from_secs(secs),
    }
}

#[tokio::test]
async fn heartbeat_reports_requested_cancellations() {
    let db = TestDb::new().await;
    let store = db.store();
    store.enqueue(new_job("noop")).await.unwrap();
    let job = claim_one(&store, "noop").await;
    sqlx::query("UPDATE job.jobs SET cancel_requested = true WHERE id = $1")
        .bind(job.lease.id)
        .execute(store.pool())
        .await
        .unwrap();
    let report = store.heartbeat(&[renew(job.lease, 30)]).await.unwrap();
    assert_eq!(report.cancel_requested, vec![job.lease.id]);
    assert!(report.lost.is_empty());
    db.close().await;
}
