//! Deadlines: a job not started by its deadline never runs, and is discarded as expired.

use std::time::Duration;

use job::{Enqueue, JobState};
use job_core::Pruner;

use crate::common::*;

#[tokio::test]
async fn a_job_past_its_deadline_is_never_claimed_and_is_discarded_as_expired() {
    let h = Harness::new().await;
    let late = Enqueue::new(Noop { n: 1 })
        .deadline(chrono::Utc::now() - chrono::Duration::seconds(1))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let on_time = Enqueue::new(Noop { n: 2 })
        .deadline_in(Duration::from_secs(3600))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let worker = h.worker().build().unwrap().start();
    h.reaches(on_time, JobState::Completed).await;
    assert_eq!(h.ledger.runs(late), 0, "never runs late");
    // Still waiting, or already discarded by the worker's own pruner pass: never running.
    assert_ne!(h.row(late).await.state, JobState::Running);
    worker.shutdown().await;

    let pass = Pruner::new(h.store.clone(), Default::default())
        .run_once()
        .await
        .unwrap();
    assert!(pass.expired.discarded <= 1);
    let row = h.row(late).await;
    assert_eq!(row.state, JobState::Discarded);
    let error = row.errors.last().unwrap();
    assert_eq!(error.class, "expired");
    let deadline = row.deadline.unwrap();
    assert!(
        error
            .message
            .contains(&deadline.format("%Y-%m-%dT%H:%M:%S").to_string()),
        "the message names the deadline: {}",
        error.message
    );
    assert_eq!(h.ledger.runs(late), 0);
}

#[tokio::test]
async fn the_workers_pruner_expires_deadlines_by_itself() {
    let h = Harness::new().await;
    // In a queue the worker does not claim from: only its expirer sees it.
    let late = Enqueue::new(Noop { n: 1 })
        .deadline_in(Duration::from_millis(1))
        .queue("nobody_claims")
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let worker = h
        .worker()
        .pruner(job_core::PrunerConfig {
            interval: Duration::from_millis(50),
            ..Default::default()
        })
        .build()
        .unwrap()
        .start();
    h.reaches(late, JobState::Discarded).await;
    assert_eq!(h.ledger.runs(late), 0);
    worker.shutdown().await;
}
