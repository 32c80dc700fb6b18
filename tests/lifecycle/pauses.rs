//! Pausing and resuming queues and kinds at runtime.

use std::time::{Duration, Instant};

use job::JobState;
use job_core::{Admin, Pause, Store};

use crate::common::*;

#[tokio::test]
async fn a_paused_kind_waits_while_others_run_and_runs_once_resumed() {
    let h = Harness::new().await;
    let worker = h.worker().build().unwrap().start();
    let kind = Pause::Kind("test.noop".into());
    assert!(h.store.pause(&kind).await.unwrap());
    assert!(!h.store.pause(&kind).await.unwrap(), "already paused");
    assert_eq!(h.store.paused().await.unwrap(), vec![kind.clone()]);

    let paused = enqueue(&h.store, Noop { n: 1 }).await;
    let other = enqueue(&h.store, Sleepy { ms: 1 }).await;
    h.reaches(other, JobState::Completed).await;
    // The other kind ran after the paused one was enqueued: several polls went by.
    let later = enqueue(&h.store, Sleepy { ms: 1 }).await;
    h.reaches(later, JobState::Completed).await;
    assert_eq!(h.row(paused).await.state, JobState::Available);
    assert_eq!(h.ledger.runs(paused), 0);

    assert!(h.store.resume(&kind).await.unwrap());
    assert!(!h.store.resume(&kind).await.unwrap(), "not paused any more");
    h.reaches(paused, JobState::Completed).await;
    worker.shutdown().await;
}

#[tokio::test]
async fn a_paused_queue_takes_nothing_until_resumed() {
    let h = Harness::new().await;
    let queue = Pause::Queue("default".into());
    h.store.pause(&queue).await.unwrap();
    let worker = h.worker().queue("other", 1).build().unwrap().start();
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    let on_other = job_core::EnqueueOptions {
        queue: Some("other".into()),
        ..Default::default()
    };
    // Progress elsewhere, twice, after the paused queue's job was enqueued.
    for n in 0..2 {
        let other = enqueue_with(&h.store, Noop { n: 10 + n }, on_other.clone()).await;
        h.reaches(other, JobState::Completed).await;
    }
    assert_eq!(h.row(id).await.state, JobState::Available);
    h.store.resume(&queue).await.unwrap();
    h.reaches(id, JobState::Completed).await;
    worker.shutdown().await;
}

/// Not a benchmark: a rough before/after of the claim with the pause check and a limited kind,
/// printed for the record (`cargo test --test lifecycle claim_cost -- --nocapture`).
#[tokio::test]
async fn claim_cost_with_pauses_and_limits_is_recorded() {
    let h = Harness::new().await;
    let jobs: Vec<_> = (0..20_000)
        .map(|i| {
            let mut j = job_core::NewJob::new("test.noop", format!(r#"{{"n":{i}}}"#));
            j.queue = "default".into();
            j
        })
        .collect();
    h.store.enqueue_many(jobs).await.unwrap();
    sqlx::query("ANALYZE job.jobs")
        .execute(h.store.pool())
        .await
        .unwrap();
    let request = |concurrency| job_core::ClaimRequest {
        queue: "default".into(),
        kinds: vec![
            job_core::ClaimKind {
                kind: "test.noop".into(),
                max_version: 1,
                lease: Duration::from_secs(30),
                concurrency,
                rate: None,
            },
            job_core::ClaimKind {
                kind: "test.other".into(),
                max_version: 1,
                lease: Duration::from_secs(30),
                concurrency: None,
                rate: None,
            },
        ],
        limit: 10,
        worker_id: "bench".into(),
    };
    async fn time(h: &Harness, r: &job_core::ClaimRequest, n: u32) -> Duration {
        let start = Instant::now();
        for _ in 0..n {
            assert!(!h.store.claim(r).await.unwrap().is_empty());
        }
        start.elapsed() / n
    }
    let plain = time(&h, &request(None), 200).await;
    for i in 0..50 {
        h.store
            .pause(&Pause::Kind(format!("some.kind.{i}")))
            .await
            .unwrap();
    }
    let with_pauses = time(&h, &request(None), 200).await;
    let limited = time(&h, &request(Some(1_000_000)), 200).await;
    println!(
        "claim of 10 from 20k: plain {plain:?}, with 50 pause rows {with_pauses:?}, \
         with a limited kind (lock + count) {limited:?}"
    );
}
