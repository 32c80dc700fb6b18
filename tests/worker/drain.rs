//! Graceful shutdown: stop claiming, wait for running jobs, release the rest at once.

use std::time::Duration;

use job::JobState;

use crate::common::*;

#[tokio::test]
async fn shutdown_waits_for_running_jobs_to_finish() {
    let h = Harness::new().await;
    let id = enqueue(&h.store, Parked { n: 1 }).await;
    let gate = Gate::default();
    let worker = job::Worker::builder(h.store.clone())
        .register::<Parked>()
        .queue("default", 2)
        .state(h.ledger.clone())
        .state(gate.clone())
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Running).await;
    // Claimed is not started: a job still on its way to a slot is released by the drain.
    eventually("the handler to start", || async {
        (h.ledger.runs(id) == 1).then_some(())
    })
    .await;
    let draining = tokio::spawn(worker.shutdown());
    // The drain is under way and waiting; let the job finish.
    gate.open();
    let report = draining.await.unwrap();
    assert!(report.finished_in_time);
    assert_eq!(report.released, 0);
    let row = h.row(id).await;
    assert_eq!(row.state, JobState::Completed);
}

#[tokio::test]
async fn shutdown_releases_unfinished_leases_for_another_worker() {
    let h = Harness::new().await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(enqueue(&h.store, Parked { n }).await);
    }
    let first = h
        .worker()
        .drain_timeout(Duration::from_millis(100))
        .build()
        .unwrap()
        .start();
    for id in &ids {
        h.reaches(*id, JobState::Running).await;
    }
    // Their code runs, not only their claims (a job still waiting for its slot goes back
    // unstarted, with nothing in its history).
    eventually("every handler to start", || async {
        ids.iter().all(|id| h.ledger.runs(*id) == 1).then_some(())
    })
    .await;
    let report = first.shutdown().await;
    assert!(!report.finished_in_time);
    assert_eq!(report.released, 3);
    for id in &ids {
        let row = h.row(*id).await;
        assert_eq!(
            row.state,
            JobState::Available,
            "released at once, not left to expire"
        );
        assert_eq!(row.attempt, 0, "a released attempt is not counted");
        assert_eq!(row.lock_token, None);
        assert_eq!(
            row.errors.len(),
            1,
            "the stopped execution is in the history"
        );
        assert_eq!(
            (row.errors[0].attempt, row.errors[0].class.as_str()),
            (1, "released")
        );
    }
    let gate = Gate::default();
    gate.open();
    let second = job::Worker::builder(h.store.clone())
        .register::<Parked>()
        .queue("default", 5)
        .state(h.ledger.clone())
        .state(gate)
        .build()
        .unwrap()
        .start();
    for id in &ids {
        let row = h.reaches(*id, JobState::Completed).await;
        assert_eq!(row.attempt, 1);
        assert_eq!(
            h.ledger.runs(*id),
            2,
            "once on the first worker, once on the second"
        );
    }
    second.shutdown().await;
}

#[tokio::test]
async fn a_drained_worker_claims_nothing_more() {
    let h = Harness::new().await;
    let worker = h.worker().build().unwrap().start();
    let report = worker.shutdown().await;
    assert!(report.finished_in_time);
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    assert_eq!(h.row(id).await.state, JobState::Available);
    assert_eq!(h.ledger.runs(id), 0);
}

/// Handlers that stop when told (`Parked` returns an error once `ctx.cancelled()` fires) and
/// are stopped by a shutdown give their attempts back, whichever comes first on the runtime's
/// threads: the handler's return or the executor seeing the stop. Counted, a job on its last
/// attempt became a dead letter at a deploy; on 4 threads, 5 to 9 jobs of 40 were counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shutdown_never_counts_the_attempts_of_handlers_that_stop_when_told() {
    let h = Harness::new().await;
    let last_attempt = job_core::EnqueueOptions {
        max_attempts: Some(1),
        ..Default::default()
    };
    let mut ids = Vec::new();
    for n in 0..40 {
        ids.push(enqueue_with(&h.store, Parked { n }, last_attempt.clone()).await);
    }
    let worker = job::Worker::builder(h.store.clone())
        .register::<Parked>()
        .queue("default", 40)
        .state(h.ledger.clone())
        .state(Gate::default())
        .drain_timeout(Duration::from_millis(100))
        // Not `Parked`'s 900 ms: a heartbeat of 40 leases held back past 600 ms on a loaded
        // run would fence one, and it would run twice.
        .configure(|c| c.lease = Some(Duration::from_secs(3)))
        .build()
        .unwrap()
        .start();
    for id in &ids {
        h.reaches(*id, JobState::Running).await;
    }
    eventually("every handler to start", || async {
        ids.iter().all(|id| h.ledger.runs(*id) == 1).then_some(())
    })
    .await;
    let report = worker.shutdown().await;
    let mut counted = Vec::new();
    for id in &ids {
        let row = h.row(*id).await;
        if (row.state, row.attempt) != (JobState::Available, 0) {
            counted.push((*id, row.state, row.attempt));
        }
    }
    assert!(counted.is_empty(), "attempts counted: {counted:?}");
    assert_eq!(report.released, 40);
}
