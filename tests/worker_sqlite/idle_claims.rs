//! A claim with nothing to take reads first and writes nothing (`SqliteStore::claim`): the
//! worker's queues still find every job, whether an insert in the process wakes them or time
//! makes it due. The poll interval here is longer than the tests: a job found only by a poll
//! would fail them.

use std::time::Duration;

use job::{JobId, JobState};
use job_core::{EnqueueOptions, RunAt};

use crate::common::*;

const QUEUES: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_enqueued_at_random_moments_beside_many_idle_queues_all_run_without_a_poll() {
    let h = Harness::new().await;
    let mut builder = job::Worker::builder(h.store.clone())
        .register::<Noop>()
        .poll_interval(Duration::from_secs(120))
        .drain_timeout(Duration::from_secs(5))
        .state(h.ledger.clone());
    for n in 0..QUEUES {
        builder = builder.queue(format!("q{n}"), 2);
    }
    let worker = builder.build().expect("a worker of many queues").start();
    // Let every queue make its first (idle) claim, then enqueue while they wait.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut ids: Vec<JobId> = Vec::new();
    for n in 0..200u32 {
        let queue = format!("q{}", fastrand::usize(..QUEUES));
        let options = EnqueueOptions {
            queue: Some(queue),
            ..EnqueueOptions::default()
        };
        ids.push(enqueue_with(&h.store, Noop { n }, options).await);
        match fastrand::u8(..4) {
            0 => {}
            1 => tokio::task::yield_now().await,
            2 => tokio::time::sleep(Duration::from_micros(fastrand::u64(..500))).await,
            _ => tokio::time::sleep(Duration::from_millis(fastrand::u64(..30))).await,
        }
    }
    let ledger = h.ledger.clone();
    // Far inside the poll interval (120 s): only the wake-ups can have found them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while ledger.total() < ids.len() {
        if tokio::time::Instant::now() > deadline {
            let mut left = Vec::new();
            for id in &ids {
                let row = h.row(*id).await;
                if row.state != JobState::Completed {
                    left.push((*id, row.queue, row.state));
                }
            }
            panic!(
                "ran {} of {} jobs in 60 s (poll interval 120 s); not completed: {left:?}",
                ledger.total(),
                ids.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;
    for id in ids {
        assert_eq!(h.row(id).await.state, JobState::Completed, "job {id}");
    }
}

#[tokio::test]
async fn a_scheduled_job_runs_once_it_is_due() {
    // No wake-up comes when a job becomes due by time: the next poll's claim reads the
    // database's now again and finds it.
    let h = Harness::new().await;
    let worker = job::Worker::builder(h.store.clone())
        .register::<Noop>()
        .queue("default", 2)
        .poll_interval(Duration::from_millis(100))
        .drain_timeout(Duration::from_secs(5))
        .state(h.ledger.clone())
        .build()
        .expect("a worker")
        .start();
    let options = EnqueueOptions {
        run_at: RunAt::In(Duration::from_millis(500)),
        ..EnqueueOptions::default()
    };
    let id = enqueue_with(&h.store, Noop { n: 1 }, options).await;
    assert_eq!(h.row(id).await.state, JobState::Scheduled);
    h.reaches(id, JobState::Completed).await;
    worker.shutdown().await;
}
