//! A job enqueued in the caller's transaction commits or rolls back with it.

use job::{JobState, Store};

use crate::common::*;

#[tokio::test]
async fn a_job_enqueued_in_a_rolled_back_transaction_never_runs() {
    let h = Harness::new().await;
    let mut tx = h.store.pool().begin().await.unwrap();
    let ghost = job::Enqueue::new(Noop { n: 1 })
        .enqueue(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let witness = enqueue(&h.store, Noop { n: 2 }).await;
    let worker = h.worker().build().unwrap().start();
    h.reaches(witness, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(h.store.get(ghost).await.unwrap(), None);
    assert_eq!(h.ledger.runs(ghost), 0);
    assert_eq!(h.ledger.total(), 1);
}

#[tokio::test]
async fn a_job_enqueued_in_a_committed_transaction_runs() {
    let h = Harness::new().await;
    let worker = h.worker().build().unwrap().start();
    let mut tx = h.store.pool().begin().await.unwrap();
    let id = job::Enqueue::new(Noop { n: 1 })
        .enqueue(&mut *tx)
        .await
        .unwrap();
    sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    h.reaches(id, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(h.ledger.runs(id), 1);
}
