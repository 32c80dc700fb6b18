//! Each way an attempt can end, and what the row records.

use std::time::Duration;

use job::JobState;

use crate::common::*;

#[tokio::test]
async fn a_job_runs_and_completes() {
    let h = Harness::new().await;
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    let worker = h.worker().build().unwrap().start();
    let row = h.reaches(id, JobState::Completed).await;
    assert_eq!(h.ledger.runs(id), 1);
    assert_eq!(row.attempt, 1);
    assert!(row.finalized_at.is_some());
    assert_eq!(row.lock_token, None);
    assert_eq!(row.locked_until, None);
    assert!(row.errors.is_empty());
    let report = worker.shutdown().await;
    assert!(report.finished_in_time);
    let stats = report.stats;
    assert_eq!((stats.claimed, stats.completed), (1, 1));
}

#[tokio::test]
async fn a_failing_job_retries_then_succeeds() {
    let h = Harness::new().await;
    let id = enqueue(
        &h.store,
        Flaky {
            failures: 2,
            how: How::Error,
        },
    )
    .await;
    let worker = h.worker().build().unwrap().start();
    let row = h.reaches(id, JobState::Completed).await;
    assert_eq!(h.ledger.snapshot()[&id], vec![1, 2, 3]);
    assert_eq!(row.attempt, 3);
    let history: Vec<_> = row
        .errors
        .iter()
        .map(|e| (e.attempt, e.class.as_str()))
        .collect();
    assert_eq!(history, [(1, "error"), (2, "error")]);
    assert_eq!(row.errors[0].message, "flaky failure 1");
    worker.shutdown().await;
}

#[tokio::test]
async fn a_retry_waits_a_delay_inside_the_jittered_bounds() {
    let h = Harness::new().await;
    let ids = [
        enqueue(&h.store, SlowRetry {}).await,
        enqueue(&h.store, SlowRetry {}).await,
        enqueue(&h.store, SlowRetry {}).await,
    ];
    let worker = h.worker().build().unwrap().start();
    let ceiling = SLOW_BACKOFF.ceiling(1);
    for id in ids {
        let row = h.reaches(id, JobState::Retryable).await;
        assert_eq!(row.errors.len(), 1);
        let waited = (row.run_at - row.errors[0].at)
            .to_std()
            .expect("run_at after the failure");
        assert!(
            waited <= ceiling,
            "delay {waited:?} is over the ceiling {ceiling:?}"
        );
    }
    worker.shutdown().await;
}

#[tokio::test]
async fn a_terminal_error_discards_and_keeps_the_history() {
    let h = Harness::new().await;
    let id = enqueue(
        &h.store,
        Flaky {
            failures: 9,
            how: How::Terminal,
        },
    )
    .await;
    let worker = h.worker().build().unwrap().start();
    let row = h.reaches(id, JobState::Discarded).await;
    assert_eq!(h.ledger.runs(id), 1, "a terminal error is never retried");
    assert_eq!(row.errors.len(), 1);
    assert_eq!(row.errors[0].class, "terminal");
    assert_eq!(row.errors[0].message, "the invoice does not exist");
    assert!(row.finalized_at.is_some());
    assert_eq!(worker.shutdown().await.released, 0);
}

#[tokio::test]
async fn exhausted_attempts_discard_the_job() {
    let h = Harness::new().await;
    let id = enqueue(
        &h.store,
        Flaky {
            failures: 9,
            how: How::Error,
        },
    )
    .await;
    let worker = h.worker().build().unwrap().start();
    let row = h.reaches(id, JobState::Discarded).await;
    assert_eq!(h.ledger.snapshot()[&id], vec![1, 2, 3]);
    let attempts: Vec<_> = row.errors.iter().map(|e| e.attempt).collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert_eq!(row.attempt, row.max_attempts);
    worker.shutdown().await;
}

#[tokio::test]
async fn a_timeout_is_retried() {
    let h = Harness::new().await;
    let id = enqueue(
        &h.store,
        Flaky {
            failures: 1,
            how: How::Timeout,
        },
    )
    .await;
    let worker = h.worker().build().unwrap().start();
    let row = h.reaches(id, JobState::Completed).await;
    assert_eq!(row.attempt, 2);
    assert_eq!(row.errors[0].class, "timeout");
    assert!(
        row.errors[0].message.contains("timeout of 300ms"),
        "{}",
        row.errors[0].message
    );
    assert_eq!(worker.stats().timeouts, 1);
    worker.shutdown().await;
}

#[tokio::test]
async fn a_panic_is_retried_and_the_worker_carries_on() {
    let h = Harness::new().await;
    let id = enqueue(
        &h.store,
        Flaky {
            failures: 1,
            how: How::Panic,
        },
    )
    .await;
    let worker = h.worker().build().unwrap().start();
    let row = h.reaches(id, JobState::Completed).await;
    assert_eq!(row.attempt, 2);
    assert_eq!(row.errors[0].class, "panic");
    assert_eq!(row.errors[0].message, "flaky panic 1");
    assert_eq!(worker.stats().panics, 1);
    let next = enqueue(&h.store, Noop { n: 2 }).await;
    h.reaches(next, JobState::Completed).await;
    worker.shutdown().await;
}

#[tokio::test]
async fn a_cancel_from_the_handler_ends_cancelled() {
    let h = Harness::new().await;
    let id = enqueue(
        &h.store,
        Flaky {
            failures: 9,
            how: How::Cancel,
        },
    )
    .await;
    let worker = h.worker().build().unwrap().start();
    let row = h.reaches(id, JobState::Cancelled).await;
    assert_eq!(h.ledger.runs(id), 1);
    assert!(row
        .errors
        .iter()
        .any(|e| e.message == "customer closed the account"));
    worker.shutdown().await;
}

#[tokio::test]
async fn a_snooze_runs_again_without_consuming_an_attempt() {
    let h = Harness::new().await;
    let id = enqueue(
        &h.store,
        Flaky {
            failures: 5,
            how: How::Snooze,
        },
    )
    .await;
    // Flaky completes once attempt > failures; a snooze never counts, so it snoozes until the
    // test sees it has run a few times, then we check no attempt was used.
    let worker = h.worker().build().unwrap().start();
    eventually("three snoozed runs", || async {
        (h.ledger.runs(id) >= 3).then_some(())
    })
    .await;
    worker.shutdown().await;
    let runs = h.ledger.snapshot()[&id].clone();
    assert!(
        runs.iter().all(|a| *a == 1),
        "every snoozed run is attempt 1: {runs:?}"
    );
    let row = h.row(id).await;
    assert!(row.attempt <= 1);
    assert!(row.errors.is_empty(), "a snooze is not an error");
}

/// Released by the test; until then the job waits.
#[derive(Clone)]
struct DoomGate(std::sync::Arc<tokio::sync::Semaphore>);

/// Waits for its gate, then gives up for good on its only attempt.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Doomed {
    n: u32,
}

impl job::Job for Doomed {
    const KIND: &'static str = "test.doomed";
    const OPTIONS: job::JobOptions = job::JobOptions {
        max_attempts: 1,
        ..job::JobOptions::DEFAULT
    };

    async fn perform(self, ctx: job::JobContext) -> Result<(), job::JobError> {
        let gate = ctx.state::<DoomGate>()?.0.clone();
        let _ = gate.acquire().await;
        Err(job::JobError::terminal("gave up"))
    }
}

/// A cancel requested after the last heartbeat, then a terminal error: the store writes a
/// cancellation (no dead letter, no compensation), and the worker counts a cancellation, as
/// the row says, not a dead letter.
#[tokio::test]
async fn a_discard_written_as_a_cancellation_is_counted_as_one() {
    use job::Admin;
    let h = Harness::new().await;
    let gate = DoomGate(std::sync::Arc::new(tokio::sync::Semaphore::new(0)));
    let id = enqueue(&h.store, Doomed { n: 1 }).await;
    let worker = job::Worker::builder(h.store.clone())
        .register::<Doomed>()
        .queue("default", 1)
        .poll_interval(Duration::from_millis(50))
        // No heartbeat before the job ends: the worker never hears of the cancel.
        .configure(|c| c.lease = Some(Duration::from_secs(30)))
        .state(gate.clone())
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Running).await;
    h.store.cancel(id).await.unwrap();
    gate.0.add_permits(1);
    h.reaches(id, JobState::Cancelled).await;
    eventually("the outcome to be counted", || async {
        let s = worker.stats();
        (s.discarded + s.cancelled >= 1).then_some(())
    })
    .await;
    let stats = worker.shutdown().await.stats;
    assert_eq!((stats.discarded, stats.cancelled), (0, 1), "{stats:?}");
}

/// Fails for good; compensated by [`VersionedUndo`].
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Undoable {
    n: u32,
}

impl job::Job for Undoable {
    const KIND: &'static str = "test.undoable";
    const OPTIONS: job::JobOptions = job::JobOptions {
        compensate: Some(job::Compensate::of::<VersionedUndo>()),
        ..job::JobOptions::DEFAULT
    };

    async fn perform(self, _ctx: job::JobContext) -> Result<(), job::JobError> {
        Err(job::JobError::terminal("cannot"))
    }
}

/// A compensating kind with a priority, attempts and payload version of its own.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct VersionedUndo {
    discarded: job::Discarded,
}

impl job::Job for VersionedUndo {
    const KIND: &'static str = "test.versioned_undo";
    const VERSION: i32 = 2;
    const OPTIONS: job::JobOptions = job::JobOptions {
        priority: 7,
        max_attempts: 2,
        ..job::JobOptions::DEFAULT
    };

    async fn perform(self, _ctx: job::JobContext) -> Result<(), job::JobError> {
        Ok(())
    }
}

/// The compensating job is enqueued with its kind's priority, attempts and payload version,
/// and runs: at version 2 it was discarded as poison (the database wrote version 1).
#[tokio::test]
async fn a_compensating_job_runs_at_its_kinds_version_with_its_options() {
    use job::Admin;
    let h = Harness::new().await;
    let id = enqueue(&h.store, Undoable { n: 1 }).await;
    let worker = job::Worker::builder(h.store.clone())
        .register::<Undoable>()
        .register::<VersionedUndo>()
        .queue("default", 2)
        .poll_interval(Duration::from_millis(20))
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Discarded).await;
    let undo = eventually("the compensating job to complete", || async {
        let rows = h
            .store
            .list(&job::JobFilter {
                kind: Some("test.versioned_undo".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        rows.into_iter()
            .find(|r| r.state.is_terminal())
            .map(|r| (r.state, r.priority, r.max_attempts, r.payload_version))
    })
    .await;
    worker.shutdown().await;
    assert_eq!(undo, (JobState::Completed, 7, 2, 2));
}
