//! Heartbeats: renewing leases and reporting the lost ones.

mod store_support;

use std::time::Duration;

use job_core::{Finalize, Lease, Outcome, Renewal, Store};
use job_testkit::TestDb;
use store_support::{claim_one, new_job};
use uuid::Uuid;

fn renew(lease: Lease, secs: u64) -> Renewal {
    Renewal {
        lease,
        extend_by: Duration::from_secs(secs),
    }
}

#[tokio::test]
async fn heartbeat_renews_and_reports_lost_leases() {
    let db = TestDb::new().await;
    let store = db.store();
    store
        .enqueue_many(vec![new_job("noop"), new_job("noop"), new_job("noop")])
        .await
        .unwrap();
    let claimed = store
        .claim(&store_support::request(&["noop"], 3))
        .await
        .unwrap();
    let (alive, finished, stolen) = (claimed[0].lease, claimed[1].lease, claimed[2].lease);
    store
        .finalize(&[Finalize {
            lease: finished,
            outcome: Outcome::Complete,
        }])
        .await
        .unwrap();
    let forged = Lease {
        id: stolen.id,
        token: Uuid::new_v4(),
    };
    let before = store
        .get(alive.id)
        .await
        .unwrap()
        .unwrap()
        .locked_until
        .unwrap();

    let report = store
        .heartbeat(&[
            renew(alive, 3600),
            renew(finished, 3600),
            renew(forged, 3600),
        ])
        .await
        .unwrap();
    assert_eq!(report.lost, vec![finished.id, stolen.id]);
    assert!(report.cancel_requested.is_empty());

    let after = store
        .get(alive.id)
        .await
        .unwrap()
        .unwrap()
        .locked_until
        .unwrap();
    assert!(
        after - before > chrono::Duration::minutes(59),
        "{before} -> {after}"
    );
    // The forged token renewed nothing.
    let untouched = store.get(stolen.id).await.unwrap().unwrap();
    assert!(untouched.locked_until.unwrap() < after - chrono::Duration::minutes(59));
    assert_eq!(store.heartbeat(&[]).await.unwrap(), Default::default());
    db.close().await;
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
