//! Cancellation by id, in every state.

use std::sync::atomic::Ordering;
use std::time::Duration;

use job::{Enqueue, JobState};
use job_core::{Admin, Cancelled};

use crate::common::*;
use crate::support::*;

#[tokio::test]
async fn cancelling_a_waiting_job_cancels_it_at_once() {
    let h = Harness::new().await;
    let id = Enqueue::new(Noop { n: 1 })
        .schedule_in(Duration::from_secs(60))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    assert_eq!(h.store.cancel(id).await.unwrap(), Cancelled::Now);
    let row = h.row(id).await;
    assert_eq!(row.state, JobState::Cancelled);
    assert!(row.finalized_at.is_some());
    assert_eq!(row.errors.len(), 1);
    assert_eq!(row.errors[0].class, "cancelled");
    assert_eq!(
        h.store.cancel(id).await.unwrap(),
        Cancelled::AlreadyFinished(JobState::Cancelled),
        "a second cancel is a no-op that says so"
    );
}

#[tokio::test]
async fn cancelling_a_missing_or_finished_job_says_so() {
    let h = Harness::new().await;
    assert_eq!(h.store.cancel(424242).await.unwrap(), Cancelled::NotFound);
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    let worker = h.worker().build().unwrap().start();
    h.reaches(id, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(
        h.store.cancel(id).await.unwrap(),
        Cancelled::AlreadyFinished(JobState::Completed)
    );
    assert_eq!(h.row(id).await.state, JobState::Completed);
}

#[tokio::test]
async fn cancelling_a_running_job_reaches_its_handler_and_ends_it_cancelled() {
    let h = Harness::new().await;
    let spin = Spin::default();
    let worker = lifecycle_worker(&h)
        .state(spin.clone())
        .build()
        .unwrap()
        .start();
    let id = Enqueue::new(Spinner {})
        .enqueue(h.store.pool())
        .await
        .unwrap();
    h.reaches(id, JobState::Running).await;
    eventually("the handler to start", || async {
        spin.started.load(Ordering::SeqCst).then_some(())
    })
    .await;
    assert_eq!(h.store.cancel(id).await.unwrap(), Cancelled::Requested);
    assert!(h.row(id).await.cancel_requested);
    let row = h.reaches(id, JobState::Cancelled).await;
    assert!(
        spin.noticed.load(Ordering::SeqCst),
        "the handler saw ctx.is_cancelled()"
    );
    assert_eq!(row.attempt, 1, "cancelled, not retried");
    assert_eq!(row.errors.last().unwrap().class, "cancelled");
    worker.shutdown().await;
}

#[tokio::test]
async fn a_cancel_requested_job_that_went_back_to_waiting_is_cancelled_by_the_pruner() {
    let h = Harness::new().await;
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    // As if it had been running when the cancel came, then its lease expired and the
    // rescuer made it retryable.
    sqlx::query("UPDATE job.jobs SET state = 'retryable', cancel_requested = true WHERE id = $1")
        .bind(id)
        .execute(h.store.pool())
        .await
        .unwrap();
    let pruner = job_core::Pruner::new(h.store.clone(), Default::default());
    let pass = pruner.run_once().await.unwrap();
    assert_eq!(pass.expired.cancelled, 1);
    assert_eq!(h.row(id).await.state, JobState::Cancelled);
}
