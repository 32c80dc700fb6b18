//! Rescue of expired leases, and release on shutdown.

mod store_support;

use std::time::Duration;

use job_core::{ClaimKind, ClaimRequest, JobState, Lease, NewJob, Rescued, Store};
use job_postgres::PgStore;
use job_testkit::TestDb;
use store_support::{claim_one, kind, new_job, request, until_lease_expired};
use uuid::Uuid;

/// Claims every due `noop` with a 50 ms lease.
fn short_lease() -> ClaimRequest {
    ClaimRequest {
        kinds: vec![ClaimKind {
            lease: Duration::from_millis(50),
            ..kind("noop")
        }],
        worker_id: "doomed-worker".into(),
        ..request(&[], 10)
    }
}

async fn state(store: &PgStore, id: i64) -> JobState {
    store.get(id).await.unwrap().unwrap().state
}

#[tokio::test]
async fn rescue_only_touches_expired_leases() {
    let db = TestDb::new().await;
    let store = db.store();
    let expiring = store.enqueue(new_job("noop")).await.unwrap();
    assert_eq!(store.claim(&short_lease()).await.unwrap().len(), 1);
    let live_id = store.enqueue(new_job("noop")).await.unwrap();
    let live = claim_one(&store, "noop").await;
    assert_eq!(live.lease.id, live_id);
    until_lease_expired(store.pool(), expiring).await;
    let live_before = store.get(live_id).await.unwrap().unwrap();

    let rescued = store.rescue_expired(100).await.unwrap();
    assert_eq!(
        rescued,
        Rescued {
            retried: 1,
            discarded: 0
        }
    );
    let row = store.get(expiring).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Retryable);
    assert_eq!(row.attempt, 1, "the lost attempt counts");
    assert_eq!(
        (row.lock_token, row.locked_until, row.locked_by),
        (None, None, None)
    );
    let error = &row.errors[0];
    assert_eq!((error.attempt, error.class.as_str()), (1, "lease_expired"));
    assert!(error.message.contains("doomed-worker"), "{}", error.message);
    // The live lease survived untouched.
    assert_eq!(store.get(live_id).await.unwrap().unwrap(), live_before);
    // The rescued job is due at once.
    let again = claim_one(&store, "noop").await;
    assert_eq!((again.lease.id, again.attempt), (expiring, 2));
    assert_eq!(store.rescue_expired(100).await.unwrap(), Rescued::default());
    db.close().await;
}

#[tokio::test]
async fn rescue_discards_an_expired_lease_with_no_attempts_left() {
    let db = TestDb::new().await;
    let store = db.store();
    let last_try = NewJob {
        max_attempts: 1,
        ..new_job("noop")
    };
    let id = store.enqueue(last_try).await.unwrap();
    store.claim(&short_lease()).await.unwrap();
    until_lease_expired(store.pool(), id).await;
    let rescued = store.rescue_expired(100).await.unwrap();
    assert_eq!(
        rescued,
        Rescued {
            retried: 0,
            discarded: 1
        }
    );
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Discarded);
    assert!(row.finalized_at.is_some());
    assert_eq!(row.errors[0].class, "lease_expired");
    db.close().await;
}

#[tokio::test]
async fn rescue_takes_at_most_its_limit() {
    let db = TestDb::new().await;
    let store = db.store();
    let ids = store
        .enqueue_many((0..3).map(|_| new_job("noop")).collect())
        .await
        .unwrap();
    store.claim(&short_lease()).await.unwrap();
    for id in &ids {
        until_lease_expired(store.pool(), *id).await;
    }
    assert_eq!(store.rescue_expired(2).await.unwrap().retried, 2);
    assert_eq!(store.rescue_expired(2).await.unwrap().retried, 1);
    db.close().await;
}

#[tokio::test]
async fn an_expired_lease_that_was_rescued_cannot_finalize() {
    let db = TestDb::new().await;
    let store = db.store();
    let id = store.enqueue(new_job("noop")).await.unwrap();
    let claimed = store.claim(&short_lease()).await.unwrap();
    until_lease_expired(store.pool(), id).await;
    store.rescue_expired(100).await.unwrap();
    let late = job_core::Finalize {
        lease: claimed[0].lease,
        outcome: job_core::Outcome::Complete,
    };
    assert_eq!(
        store.finalize(&[late]).await.unwrap(),
        vec![job_core::Finalized::LeaseLost]
    );
    let renewal = job_core::Renewal {
        lease: claimed[0].lease,
        extend_by: Duration::from_secs(30),
    };
    assert_eq!(store.heartbeat(&[renewal]).await.unwrap().lost, vec![id]);
    assert_eq!(state(&store, id).await, JobState::Retryable);
    db.close().await;
}

#[tokio::test]
async fn release_makes_a_job_available_at_once_with_the_attempt_not_counted() {
    let db = TestDb::new().await;
    let store = db.store();
    let id = store.enqueue(new_job("noop")).await.unwrap();
    let job = claim_one(&store, "noop").await;
    assert_eq!(store.release(&[job.lease]).await.unwrap(), 1);
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Available);
    assert_eq!(row.attempt, 0);
    assert_eq!(
        (row.lock_token, row.locked_until, row.locked_by),
        (None, None, None)
    );
    let again = claim_one(&store, "noop").await;
    assert_eq!((again.lease.id, again.attempt), (id, 1));
    db.close().await;
}

#[tokio::test]
async fn release_with_a_stale_token_changes_nothing() {
    let db = TestDb::new().await;
    let store = db.store();
    let id = store.enqueue(new_job("noop")).await.unwrap();
    claim_one(&store, "noop").await;
    let before = store.get(id).await.unwrap().unwrap();
    let stale = Lease {
        id,
        token: Uuid::new_v4(),
    };
    assert_eq!(store.release(&[stale]).await.unwrap(), 0);
    assert_eq!(store.release(&[]).await.unwrap(), 0);
    assert_eq!(store.get(id).await.unwrap().unwrap(), before);
    db.close().await;
}

#[tokio::test]
async fn get_returns_none_for_an_unknown_id() {
    let db = TestDb::new().await;
    assert_eq!(db.store().get(12345).await.unwrap(), None);
    db.close().await;
}
